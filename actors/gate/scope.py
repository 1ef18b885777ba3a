"""Where a speculative shell command reads: inside the workspace, nowhere else.

A speculation runs without the user's approval, so what it may read is the
workspace -- the same files the file tools may open. The shell classifier
hands every simple command's arguments here, and
:mod:`fore.actors.gate.path_model` says which of them the command will open as
paths; this module resolves each one as the kernel will (against every
directory the command may be running in, through symlinks and ``..``) and
applies the one scope rule of the file tools,
:func:`fore.actors.tools.paths.resolve_in_workspace`. A path that leaves the
workspace, a path under ``/proc/<pid>`` (another process's environment, command
line, memory, open files), an unquoted ``~`` or a glob whose matches the walk
cannot see make the command at least ``unknown`` -- a boundary, with the
reason.

Globs and brace patterns (:mod:`fore.actors.gate.braces`) are expanded
against the real directories (bounded, and more permissive than bash's
matching, never less), and every name they could produce is checked.

**Where the command runs.** A command runs in the call's directory, or where a
``cd``/``pushd`` earlier in the same command took it; ``git -C DIR`` runs git
in ``DIR``. The walker keeps every directory the command may be in (it never
forgets one, so control flow cannot hide a ``cd``), each as bash's logical
``$PWD`` and the physical directory behind it -- ``cd link/..`` goes back to
where ``link`` is, not to the parent of its target.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fore.actors.gate.braces import MAX_GLOB_PATHS, expand_braces
from fore.actors.gate.rules import DYNAMIC, Verdict, unknown
from fore.actors.tools.paths import (
    Entry,
    FsError,
    PathOutOfScope,
    lstat_entry,
    resolve_in_workspace,
)

MAX_GLOB_ENTRIES = 4096
"""Directory entries one command's globs may list before the check gives up (doubt)."""
MAX_WALK_ENTRIES = 20_000
"""Entries a symlink-following walk (``grep -R``) may have before the check gives up."""
MAX_DIRECTORIES = 16
"""Directories one command may be running in (after ``cd``) before the check gives up."""

DEVICES: frozenset[str] = frozenset(
    {
        "/dev/null",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
        "/dev/stdin",
        "/dev/stdout",
        "/dev/stderr",
    }
)
"""Paths outside the workspace that hold nothing of anyone's: reading them is harmless."""

_WILD = re.compile(r"[*?\[\\{}]")
"""A pattern component with any of these is matched against directory entries."""
_SIMPLE_WILD = re.compile(r"[^\[\\{}]*")
"""A component whose only wildcards are ``*`` and ``?`` (fnmatch matches it as bash does)."""
_PRIVATE_PROC = re.compile(r"/proc/(?:\d+|self|thread-self)(?:/|$)|/dev/fd(?:/|$)")


# ---------------------------------------------------------------------------
# Resolving paths against the workspace
# ---------------------------------------------------------------------------


def private_process_path(path: str) -> bool:
    """Whether absolute ``path`` is a process's own data: ``/proc/<pid>/...`` or ``/dev/fd``.

    ``environ``, ``cmdline``, ``mem``, ``maps``, ``fd/``, ``task/*/environ`` ...
    of the runtime or any other process carry its secrets; ``/proc/self`` and
    ``/dev/fd`` are the same files under another name.
    """
    return _PRIVATE_PROC.match(posixpath.normpath(path) + "/") is not None


@dataclass(slots=True)
class _Directory:
    logical: str
    """The shell's ``$PWD``, workspace-relative and lexical (may pass through symlinks)."""
    physical: str
    """The directory itself, workspace-relative and free of symlinks."""


class Scope:
    """The scope check of one command: the workspace, where the command may be, a budget.

    ``root`` must be absolute and free of symlinks; ``cwd`` is the directory
    the command starts in, relative to ``root``. Lookups are cached for the
    duration of one classification only (the tree may change between calls).
    """

    __slots__ = ("_cache", "_entries_left", "_listed", "directories", "git_directories", "root")

    def __init__(self, root: str, cwd: str = "") -> None:
        self.root = root
        self.directories: list[_Directory] = [_Directory(cwd, cwd)]
        self.git_directories: set[str] = set()
        self._cache: dict[str, Entry] = {}
        self._listed: dict[str, list[str]] = {}
        self._entries_left = MAX_GLOB_ENTRIES

    def lookup(self, rel: str) -> Entry:
        entry = self._cache.get(rel)
        if entry is None:
            entry = lstat_entry(self.root, rel)
            self._cache[rel] = entry
        return entry

    # -- single paths -------------------------------------------------------

    def path(self, text: str, bases: Sequence[str] | None = None) -> Verdict | None:
        """Doubt if ``text`` leads outside the workspace from any directory the command is in."""
        if text in DEVICES:
            return None
        if text.startswith("/") and private_process_path(text):
            return _private(text)
        for base in self._physical() if bases is None else bases:
            problem = self._resolve(text, base)
            if isinstance(problem, Verdict):
                return problem
        return None

    def _physical(self) -> list[str]:
        return list(dict.fromkeys(directory.physical for directory in self.directories))

    def _resolve(self, text: str, base: str) -> Verdict | str | None:
        """Doubt for ``text`` from ``base``, or the path it reaches (None: the kernel stops)."""
        if not text.startswith("/"):
            lexical = posixpath.normpath(posixpath.join(self.root, base, text))
            if private_process_path(lexical):
                return _private(text)
        try:
            found = resolve_in_workspace(text, self.root, self.lookup, cwd=base)
        except PathOutOfScope as exc:
            return unknown(f"it reads outside the workspace: {exc}")
        except FsError as exc:
            return unknown(f"{text!r} cannot be checked: {exc}")
        except OSError as exc:
            return unknown(f"{text!r} cannot be checked: {exc.strerror or exc}")
        if found.stop != "ok":
            return None
        if private_process_path(posixpath.join(self.root, found.rel)):
            return _private(text)
        return found.rel

    # -- patterns -------------------------------------------------------------

    def pattern(self, pattern: str, *, tilde: bool = False) -> Verdict | None:
        """Doubt if any name glob/brace ``pattern`` may expand to leads outside the workspace."""
        if tilde:
            return unknown(f"{pattern!r} lists the home directory, outside the workspace")
        expanded = expand_braces(pattern, MAX_GLOB_PATHS)
        if expanded is None:
            return unknown(f"the brace pattern {pattern!r} expands to too many words to check")
        for base in self._physical():
            for one in expanded:
                if one.startswith("~"):
                    return unknown(f"{one!r} reads the home directory, outside the workspace")
                problem = self._glob(one, base)
                if problem is not None:
                    return problem
        return None

    def _glob(self, pattern: str, base: str) -> Verdict | None:
        parts = pattern.split("/")
        prefixes = ["/" if pattern.startswith("/") else ""]
        if pattern.startswith("/"):
            parts = parts[1:]
        for part in parts:
            if not _WILD.search(part):
                prefixes = [posixpath.join(prefix, part) if prefix else part for prefix in prefixes]
                continue
            grown: list[str] = []
            for prefix in prefixes:
                located = self._resolve(prefix or ".", base)
                if isinstance(located, Verdict):
                    return located
                if located is None:
                    continue  # no such directory: the pattern stays literal
                names = self._list(located)
                if names is None:
                    return unknown(f"the glob {pattern!r} lists too many entries to check")
                for name in _candidates(part, names):
                    grown.append(posixpath.join(prefix, name) if prefix else name)
                if len(grown) > MAX_GLOB_PATHS:
                    return unknown(f"the glob {pattern!r} matches too many paths to check")
            prefixes = grown
            if not prefixes:
                break
        for prefix in prefixes:
            located = self._resolve(prefix or ".", base)
            if isinstance(located, Verdict):
                return located
        # No match leaves the word as it is: the literal text is a path too.
        literal = self._resolve(_unescape(pattern) or ".", base)
        return literal if isinstance(literal, Verdict) else None

    def walk(self, text: str, how: str) -> Verdict | None:
        """Doubt if a walk below ``text`` that follows symlinks (``how``) could leave the workspace.

        Every directory the walk reaches is listed -- through symlinks that
        stay inside too -- and every symlink in them must resolve inside.
        Bounded by :data:`MAX_WALK_ENTRIES`.
        """
        pending: list[str] = []
        for base in self._physical():
            start = self._resolve(text, base)
            if isinstance(start, Verdict):
                return start
            if start is not None:
                pending.append(start)
        seen: set[str] = set()
        budget = MAX_WALK_ENTRIES
        while pending:
            rel = pending.pop()
            if rel in seen:
                continue
            seen.add(rel)
            try:
                with os.scandir(os.path.join(self.root, rel) if rel else self.root) as entries:
                    found = [
                        (entry.name, entry.is_symlink(), entry.is_dir(follow_symlinks=False))
                        for entry in entries
                    ]
            except OSError:
                continue  # not a directory (or unreadable): nothing below it
            budget -= len(found)
            if budget < 0:
                return unknown(f"{how} walks too many entries to check for symlinks")
            for name, link, directory in found:
                child = posixpath.join(rel, name) if rel else name
                if directory:
                    pending.append(child)
                elif link:
                    target = self._resolve(child, "")
                    if isinstance(target, Verdict):
                        return unknown(f"{how} follows symlinks: {target.reason}")
                    if target is not None and self.lookup(target).kind == "dir":
                        pending.append(target)
        return None

    def _list(self, rel: str) -> list[str] | None:
        names = self._listed.get(rel)
        if names is not None:
            return names
        try:
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as entries:
                names = []
                for entry in entries:
                    self._entries_left -= 1
                    if self._entries_left < 0:
                        return None
                    names.append(entry.name)
        except OSError:
            names = []
        self._listed[rel] = names
        return names

    # -- where the command runs ---------------------------------------------------

    def change_directory(self, command: str, args: Sequence[str]) -> Verdict | None:
        """``cd``/``pushd``/``popd``: add where it may go; doubt if that leaves the workspace."""
        physical_only = False
        operands: list[str] = []
        for arg in args:
            if arg in ("-P", "-L", "-e", "-@") and not operands:
                physical_only = physical_only or arg == "-P"
                continue
            operands.append(arg)
        if command == "popd" or (command == "pushd" and all(_rotation(arg) for arg in operands)):
            return None  # back to a directory already visited
        if len(operands) != 1 or operands[0] == DYNAMIC:
            if not operands:
                return unknown(f"{command} without a directory goes to the home directory")
            return unknown(f"{command} goes to a directory only known at run time")
        target = operands[0]
        if target == "-":
            return unknown(f"{command} - goes back to a directory only known at run time")
        if (
            "CDPATH" in os.environ
            and not target.startswith(("/", "./", "../"))
            and target
            not in (
                ".",
                "..",
            )
        ):
            return unknown(f"{command} {target} may follow CDPATH out of the workspace")
        added: list[_Directory] = []
        for directory in self.directories:
            physical = self._resolve(target, directory.physical)
            if isinstance(physical, Verdict):
                return physical
            if physical is not None:
                added.append(_Directory(physical, physical))
            if physical_only:
                continue
            logical = self._logical(directory.logical, target)
            if logical is None:
                return unknown(f"{command} {target} leaves the workspace")
            through = self._resolve(logical or ".", "")
            if isinstance(through, Verdict):
                return through
            if through is not None:
                added.append(_Directory(logical.strip("/"), through))
        for directory in added:
            if directory not in self.directories:
                self.directories.append(directory)
        if len(self.directories) > MAX_DIRECTORIES:
            return unknown("the command changes directory too often to check")
        return None

    def _logical(self, current: str, target: str) -> str | None:
        """Bash's ``cd -L``: ``$PWD/target`` with ``..`` removed lexically (None: outside)."""
        if target.startswith("/"):
            absolute = posixpath.normpath(target)
            root = self.root.rstrip("/")
            if absolute == root or not root:
                return absolute.strip("/") if not root else ""
            if not absolute.startswith(root + "/"):
                return None
            return absolute[len(root) + 1 :]
        joined = posixpath.normpath(posixpath.join(current, target))
        if joined == ".." or joined.startswith("../"):
            return None
        return "" if joined == "." else joined

    def git_bases(self, bases: Sequence[str] | None) -> list[str]:
        """Where git runs: ``bases`` after ``-C``, else every directory the command may be in."""
        return self._physical() if bases is None else list(bases)

    def directory(self, text: str, base: str) -> Verdict | str | None:
        """``text`` resolved from ``base`` (None: it does not exist), or doubt if it leads out."""
        return self._resolve(text, base)

    def git_directory(self, bases: Sequence[str]) -> None:
        """Note that git runs in each of ``bases`` (its config is probed there)."""
        for base in bases:
            self.git_directories.add(os.path.join(self.root, base) if base else self.root)


def _rotation(arg: str) -> bool:
    return len(arg) > 1 and arg[0] in "+-" and arg[1:].isdigit()


def _private(text: str) -> Verdict:
    return unknown(
        f"{text!r} is a process's private data under /proc (environment, command line, "
        "memory or open files), which may hold secrets"
    )


def _candidates(part: str, names: list[str]) -> list[str]:
    """The entries a glob component may match: a superset of what bash matches.

    With only ``*`` and ``?`` fnmatch matches as bash does (it also matches a
    leading dot, which bash does not: a superset). Brackets, escapes and
    anything else match every entry. ``.`` and ``..`` are candidates when the
    component starts with a dot (bash before 5.2 matches them with ``.*``).
    """
    if _SIMPLE_WILD.fullmatch(part):
        matched = [name for name in names if fnmatch.fnmatchcase(name, part)]
    else:
        matched = list(names)
    if part.startswith((".", "[", "\\")):
        matched.extend((".", ".."))
    return matched


def _unescape(pattern: str) -> str:
    return re.sub(r"\\(.)", r"\1", pattern)


__all__ = [
    "DEVICES",
    "MAX_DIRECTORIES",
    "MAX_GLOB_ENTRIES",
    "MAX_WALK_ENTRIES",
    "Scope",
    "private_process_path",
]
