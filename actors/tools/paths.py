"""Path rules shared by every filesystem view and the shell gate (pure, property-tested).

Tools receive paths from the model. Before any syscall, a path is normalised
lexically into a workspace-relative POSIX path: ``""`` is the workspace root,
``..`` may not climb above it, an absolute path is accepted only when it lies
inside the root, and a NUL byte is refused.

**The scope rule** is :func:`resolve_in_workspace`: a path is in scope when
resolving it the way the kernel does -- component by component from the
directory it is relative to, ``..`` applied to where the walk really is,
every symlink followed -- never leaves the workspace root, not even for a
step. The file tools apply it to a path they have normalised first (their
paths are Fore's syntax, not the kernel's); the shell gate applies it to the
operands of a speculative command as bash will hand them to the kernel. Both
answer through one function, so a path one refuses the other refuses too. The
rule itself is pure: the filesystem is seen only through a ``lookup`` callback,
which the file views back with real ``lstat``/``readlink`` calls and the tests
with a dictionary.
"""

from __future__ import annotations

import os
import posixpath
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fore.errors import FsError, PathOutOfScope

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["FsError", "PathOutOfScope"]


def normalize(path: str, root: str, *, strip: bool = True) -> str:
    """Workspace-relative, normalised POSIX form of ``path`` ("" for the root).

    ``root`` is the workspace root's absolute path (already free of symlinks).
    Raises :class:`PathOutOfScope` for paths outside it and :class:`FsError`
    for malformed input. Names such as ``..foo`` and ``foo..`` are ordinary names.
    Surrounding whitespace (a model's stray newline) is dropped unless
    ``strip`` is False (symlink targets are taken literally).
    """
    if not isinstance(path, str):
        raise FsError("path must be a string")
    if "\x00" in path:
        raise FsError("path contains a NUL byte")
    text = path.strip() if strip else path
    if text in ("", "."):
        return ""
    if text.startswith("~"):
        raise PathOutOfScope(f"{path}: home-relative paths are outside the workspace")
    if text.startswith("/"):
        root_norm = posixpath.normpath(root)
        candidate = posixpath.normpath(text)
        if candidate == root_norm:
            return ""
        prefix = root_norm.rstrip("/") + "/"
        if not candidate.startswith(prefix):
            raise PathOutOfScope(f"{path}: absolute path outside the workspace")
        text = candidate[len(prefix) :]
    rel = posixpath.normpath(text)
    if rel == ".":
        return ""
    if rel == ".." or rel.startswith("../"):
        raise PathOutOfScope(f"{path}: climbs above the workspace root")
    return rel


EntryKind = Literal["missing", "dir", "file", "link"]
"""What a name is when the scope walk reaches it (``file`` stands for any non-directory)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One ``lookup`` answer: the kind of a name and, for a symlink, its target."""

    kind: EntryKind
    target: str = ""


Lookup = Callable[[str], Entry]
"""Looks up a workspace-relative path whose parents are real directories inside the root.

May raise ``OSError`` (permission denied, say); the caller decides what that means."""

_MISSING, _DIR, _FILE = Entry("missing"), Entry("dir"), Entry("file")

MAX_SYMLINK_HOPS = 40
"""Symlinks one resolution may follow (Linux's own limit), so a loop ends."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where a path leads inside the workspace.

    ``rel`` is the workspace-relative path the kernel would reach (``""``: the
    root). ``stop`` says whether the walk got to the end: ``"missing"`` or
    ``"not_dir"`` at ``at`` mean the kernel would fail there (ENOENT /
    ENOTDIR) -- nothing past that point is reached, so nothing past it can be
    out of scope; ``rel`` then holds the rest of the path appended unresolved.
    """

    rel: str
    stop: Literal["ok", "missing", "not_dir"] = "ok"
    at: str = ""


def resolve_in_workspace(path: str, root: str, lookup: Lookup, *, cwd: str = "") -> Resolved:
    """Resolve ``path`` like the kernel; raise :class:`PathOutOfScope` if it ever leaves ``root``.

    ``root`` is the workspace's absolute path, free of symlinks. A relative
    ``path`` starts at ``cwd`` (workspace-relative, itself resolved); an
    absolute one must spell out the root (another spelling of the same
    directory through a symlink is refused, never guessed). ``..`` at the root,
    an absolute path or symlink target outside it, and a home-relative path
    (``~``) are out of scope. A path the kernel could not finish resolving
    (a missing name, a file used as a directory) stops there: whatever follows
    is never reached. Raises :class:`FsError` for a NUL byte or a symlink loop.
    """
    if "\x00" in path:
        raise FsError("path contains a NUL byte")
    if path.startswith("~"):
        raise PathOutOfScope(f"{path}: home-relative paths are outside the workspace")
    root = posixpath.normpath(root)
    done: list[str] = []
    pending: list[str]
    if path.startswith("/"):
        pending = _below_root(path, root, path)
    else:
        done = [part for part in cwd.split("/") if part]
        pending = path.split("/")
    hops = 0
    link = ""  # the last symlink followed, named when its target leads out
    pending.reverse()  # a stack: the next component is last
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if not done:
                if link:
                    raise PathOutOfScope(
                        f"{path}: leads outside the workspace through the symlink {link}"
                    )
                raise PathOutOfScope(f"{path}: climbs above the workspace root")
            done.pop()
            continue
        current = "/".join([*done, name])
        entry = lookup(current)
        if entry.kind == "link":
            link = current
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise FsError(f"{path}: too many levels of symbolic links")
            target = entry.target
            if target.startswith("/"):
                try:
                    rest = _below_root(target, root, path)
                except PathOutOfScope:
                    raise PathOutOfScope(
                        f"{current} is a symlink that leads outside the workspace"
                    ) from None
                done = []
            else:
                rest = target.split("/")
            pending.extend(reversed(rest))
            continue
        if entry.kind == "missing":
            return Resolved("/".join([*done, name, *reversed(pending)]), "missing", current)
        if entry.kind == "file" and pending:
            return Resolved("/".join([*done, name, *reversed(pending)]), "not_dir", current)
        done.append(name)
    return Resolved("/".join(done))


def _below_root(path: str, root: str, original: str) -> list[str]:
    """The components of absolute ``path`` below ``root``; out of scope if it is not below it.

    The root is free of symlinks, so along its own spelling ``.`` and ``..``
    mean what they say lexically; the first component that leaves that
    spelling leaves the workspace.
    """
    root_parts = [part for part in root.split("/") if part]
    parts = path.split("/")
    position: list[str] = []
    index = 0
    while index < len(parts) and len(position) < len(root_parts):
        part = parts[index]
        index += 1
        if part in ("", "."):
            continue
        if part == "..":
            if position:
                position.pop()
            continue
        if len(position) < len(root_parts) and part == root_parts[len(position)]:
            position.append(part)
            continue
        raise PathOutOfScope(f"{original}: absolute path outside the workspace")
    if len(position) < len(root_parts):
        raise PathOutOfScope(f"{original}: absolute path outside the workspace")
    return parts[index:]


def lstat_entry(root: str, rel: str) -> Entry:
    """What ``rel`` under ``root`` is, by ``lstat`` (and ``readlink`` for a symlink)."""
    full = f"{root}/{rel}" if rel else root
    try:
        mode = os.lstat(full).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return _MISSING
    if stat_mod.S_ISLNK(mode):
        return Entry("link", os.readlink(full))
    return _DIR if stat_mod.S_ISDIR(mode) else _FILE


def lstat_lookup(root: str) -> Lookup:
    """A :data:`Lookup` backed by ``lstat``/``readlink`` under ``root``."""

    def lookup(rel: str) -> Entry:
        return lstat_entry(root, rel)

    return lookup


def write_key(path: str, root: str | None) -> str:
    """The key under which the pool orders writes to ``path`` (lexical, no syscalls).

    ``./a``, ``a`` and ``<root>/a`` are the same key; a path that cannot be
    normalised keys as itself (the call will fail on its own anyway).
    """
    try:
        return normalize(path, root or "/nonexistent-root")
    except FsError:
        return path


def split_lines(text: str) -> list[str]:
    """Lines as editors, compilers and ``grep -n`` count them.

    Only ``\n`` ends a line (``str.splitlines`` also breaks on form feeds and
    U+2028, which shifts line numbers); a trailing ``\r`` is dropped; a final
    newline does not start an extra empty line.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
