"""Where a speculative shell command reads: inside the workspace, nowhere else.

A speculation runs without the user's approval, so what it may read is the
workspace -- the same files the file tools may open. The shell classifier
hands every simple command's arguments here; this module decides which of them
the command will open as paths, resolves each one as the kernel will (against
every directory the command may be running in, through symlinks and ``..``) and
applies the one scope rule of the file tools,
:func:`actors.tools.paths.resolve_in_workspace`. A path that leaves the
workspace, a path under ``/proc/<pid>`` (another process's environment, command
line, memory, open files), an unquoted ``~`` or a glob whose matches the walk
cannot see make the command at least ``unknown`` -- a boundary, with the
reason.

**Which arguments are paths.** Every operand and every option value is a path
unless the command's :class:`PathModel` says otherwise: ``grep``'s first
operand is a pattern (unless ``-e``/``-f`` gave one), ``cut -d/``'s value is a
delimiter, ``echo`` opens nothing. The models only ever *exempt* arguments;
an option or a command they do not describe keeps every argument a path, and
the value glued to an unknown short option (``-Xvalue``) is checked in every
reading (``value``, ``alue`` ...). An argument only known at run time (``$x``,
``$(...)``) cannot be resolved, so a command that opens paths and has one is
doubt; a glob or brace pattern is expanded against the real directories
(bounded, and more permissive than bash's matching, never less), and every
name it could produce is checked.

**Where the command runs.** A command runs in the call's directory, or where a
``cd``/``pushd`` earlier in the same command took it; ``git -C DIR`` runs git
in ``DIR``. The walker keeps every directory the command may be in (it never
forgets one, so control flow cannot hide a ``cd``), each as bash's logical
``$PWD`` and the physical directory behind it -- ``cd link/..`` goes back to
where ``link`` is, not to the parent of its target.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

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
MAX_GLOB_PATHS = 1024
"""Paths one glob may produce (after brace expansion) before the check gives up."""
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
_SEQUENCE = re.compile(r"(-?\d{1,6})\.\.(-?\d{1,6})(?:\.\.(-?\d{1,6}))?|([A-Za-z])\.\.([A-Za-z])")
_PRIVATE_PROC = re.compile(r"/proc/(?:\d+|self|thread-self)(?:/|$)|/dev/fd(?:/|$)")


# ---------------------------------------------------------------------------
# Which arguments a command opens as paths
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathModel:
    """The arguments of one command that are *not* paths (everything else is).

    ``values``/``long_values``: options whose value is not a path (a count, a
    delimiter, a pattern); ``file_values``/``long_file_values``: options whose
    value is a path (listed so that their value is consumed as such). Options
    not listed are taken as flags. ``leading`` operands are not paths (grep's
    pattern, sed's script, awk's program) unless an option in
    ``leading_given_by`` supplied them or one in ``no_leading`` says there are
    none. ``lists``: options whose value names a file *listing* more paths,
    which the check cannot see (doubt).
    """

    values: str = ""
    file_values: str = ""
    long_values: frozenset[str] = frozenset()
    long_file_values: frozenset[str] = frozenset()
    leading: int = 0
    leading_given_by: frozenset[str] = frozenset()
    no_leading: frozenset[str] = frozenset()
    operands: bool = True
    lists: frozenset[str] = frozenset()
    assignments: bool = False
    """awk: ``NAME=value`` operands assign a variable instead of naming a file."""
    pairs: frozenset[str] = frozenset()
    """Long options followed by a name and a value that are not paths (jq ``--arg``)."""
    name_then_file: frozenset[str] = frozenset()
    """Long options followed by a name and then a path (jq ``--slurpfile``)."""
    follows: frozenset[str] = frozenset()
    """Options (letters or long names) that make a recursive walk follow symlinks: any
    symlink below an operand could then lead out, so they are doubt."""


def _f(*names: str) -> frozenset[str]:
    return frozenset(names)


NO_PATHS: frozenset[str] = frozenset(
    {
        "echo", "printf", "seq", "true", "false", "pwd", "whoami", "id", "uname", "nproc",
        "basename", "dirname", "printenv", "type", "which", "tr", "expr", "numfmt",
        "bash", "sh", "zsh", "dash",
    }
)  # fmt: skip
"""Commands that open no file their arguments name (``which`` and ``type`` search ``PATH``;
a shell's ``-c`` script is classified as a command of its own, and its other arguments
are only ``$0``, ``$1`` ...)."""

_GREP = PathModel(
    values="ABCmdDeX",
    file_values="f",
    long_values=_f(
        "after-context", "before-context", "context", "max-count", "directories", "devices",
        "regexp", "label", "include", "exclude", "exclude-dir", "color", "colour",
        "binary-files", "group-separator",
    ),
    long_file_values=_f("file", "exclude-from"),
    leading=1,
    leading_given_by=_f("e", "f", "regexp", "file"),
    follows=_f("R", "dereference-recursive"),
)  # fmt: skip
_RG = PathModel(
    values="ABCMmjEegtTrd",
    file_values="f",
    long_values=_f(
        "after-context", "before-context", "context", "max-columns", "max-count", "threads",
        "encoding", "regexp", "glob", "iglob", "type", "type-not", "type-add", "type-clear",
        "replace", "max-depth", "maxdepth", "max-filesize", "color", "colors", "sort", "sortr",
        "path-separator", "field-context-separator", "field-match-separator",
        "context-separator", "dfa-size-limit", "regex-size-limit", "engine", "generate",
    ),
    long_file_values=_f("file", "ignore-file"),
    leading=1,
    leading_given_by=_f("e", "f", "regexp", "file"),
    no_leading=_f("files", "type-list"),
    follows=_f("L", "follow"),
)  # fmt: skip
_HEAD_TAIL = PathModel(
    values="ncs", long_values=_f("lines", "bytes", "sleep-interval", "max-unchanged-stats", "pid")
)
_CUT = PathModel(
    values="bcdf", long_values=_f("bytes", "characters", "delimiter", "fields", "output-delimiter")
)
_SED = PathModel(
    values="el",
    file_values="f",
    long_values=_f("expression", "line-length"),
    long_file_values=_f("file"),
    leading=1,
    leading_given_by=_f("e", "f", "expression", "file"),
)
_AWK = PathModel(
    values="Fv",
    file_values="f",
    long_values=_f("field-separator", "assign"),
    long_file_values=_f("file"),
    leading=1,
    leading_given_by=_f("f", "file"),
    assignments=True,
)
_JQ = PathModel(
    values="",
    file_values="fL",
    long_values=_f("indent", "tab", "seq"),
    long_file_values=_f("from-file"),
    leading=1,
    leading_given_by=_f("f", "from-file"),
    pairs=_f("arg", "argjson"),
    name_then_file=_f("slurpfile", "rawfile"),
)
_SORT = PathModel(
    values="ktS",
    file_values="To",
    long_values=_f("key", "field-separator", "buffer-size", "batch-size", "parallel", "sort"),
    long_file_values=_f("temporary-directory", "random-source", "output", "compress-program"),
    lists=_f("files0-from"),
)
_LS = PathModel(
    follows=_f("L", "dereference"),
    values="IwT",
    long_values=_f(
        "ignore", "hide", "width", "tabsize", "format", "time-style", "color", "sort", "time",
        "indicator-style", "quoting-style", "block-size", "hyperlink",
    ),
)  # fmt: skip
_DIFF = PathModel(
    values="IFLUCWD",
    file_values="X",
    long_values=_f(
        "ignore-matching-lines", "show-function-line", "label", "unified", "context", "width",
        "horizon-lines", "line-format", "old-line-format", "new-line-format",
        "unchanged-line-format", "old-group-format", "new-group-format",
        "unchanged-group-format", "changed-group-format", "ifdef", "tabsize", "exclude",
        "color", "palette",
    ),
    long_file_values=_f("exclude-from", "from-file", "to-file"),
)  # fmt: skip
_DATE = PathModel(
    values="dI",
    file_values="fr",
    long_values=_f("date", "iso-8601", "rfc-3339", "set"),
    long_file_values=_f("file", "reference"),
    operands=False,
)
_CHECKSUM = PathModel(values="", lists=_f("c", "check"))
_WC = PathModel(lists=_f("files0-from"))
_DU = PathModel(
    values="dBt",
    file_values="X",
    long_values=_f("max-depth", "block-size", "threshold", "exclude", "time", "time-style"),
    long_file_values=_f("exclude-from"),
    lists=_f("files0-from"),
    follows=_f("L", "dereference"),
)
_DF = PathModel(values="Btx", long_values=_f("block-size", "type", "exclude-type", "output"))
_STAT = PathModel(values="c", long_values=_f("format", "printf"))
_FILE = PathModel(
    values="FPe",
    file_values="m",
    long_values=_f("separator", "parameter", "exclude", "exclude-quiet"),
    long_file_values=_f("magic-file"),
    lists=_f("f", "files-from"),
)
_OD = PathModel(
    values="AjNSTtw",
    long_values=_f(
        "address-radix", "skip-bytes", "read-bytes", "strings", "format", "width", "endian"
    ),
)
_HEXDUMP = PathModel(values="ens", file_values="f", long_values=_f("format", "length", "skip"))
_NL = PathModel(
    values="bdfhilnsvw",
    long_values=_f(
        "body-numbering", "section-delimiter", "footer-numbering", "header-numbering",
        "line-increment", "join-blank-lines", "number-format", "number-separator",
        "starting-line-number", "number-width",
    ),
)  # fmt: skip
_STRINGS = PathModel(values="ntTe", long_values=_f("bytes", "radix", "target", "encoding"))
_WIDTH = PathModel(values="wtpg", long_values=_f("width", "tabs", "prefix", "goal"))
_PASTE = PathModel(values="d", long_values=_f("delimiters"))
_COLUMN = PathModel(
    values="cCdsoNRHWEJrl",
    long_values=_f(
        "columns", "output-width", "separator", "output-separator", "table-columns",
        "table-right", "table-hide", "table-wrap", "table-noextreme", "table-name",
        "tree", "tree-id", "tree-parent", "table-order", "table-columns-limit",
    ),
)  # fmt: skip
_COMM = PathModel(long_values=_f("output-delimiter"))
_CMP = PathModel(values="in", long_values=_f("ignore-initial", "bytes"))
_UNIQ = PathModel(values="fsw", long_values=_f("skip-fields", "skip-chars", "check-chars"))
_BASE64 = PathModel(
    values="w", file_values="o", long_values=_f("wrap"), long_file_values=_f("output")
)
_TREE = PathModel(
    values="LPIHT",
    file_values="o",
    long_values=_f("charset", "filelimit", "timefmt", "sort", "gitfile", "infofile", "hintro",
                   "houtro"),
    long_file_values=_f("output"),
    lists=_f("fromfile"),
    follows=_f("l"),
)  # fmt: skip
_REALPATH = PathModel(long_file_values=_f("relative-to", "relative-base"))
_EMPTY = PathModel()

PATH_MODELS: dict[str, PathModel] = {
    "grep": _GREP, "egrep": _GREP, "fgrep": _GREP, "rg": _RG,
    "head": _HEAD_TAIL, "tail": _HEAD_TAIL, "cut": _CUT, "sed": _SED, "awk": _AWK,
    "jq": _JQ, "sort": _SORT, "ls": _LS, "diff": _DIFF, "date": _DATE, "wc": _WC,
    "du": _DU, "df": _DF, "stat": _STAT, "file": _FILE, "od": _OD, "hexdump": _HEXDUMP,
    "nl": _NL, "strings": _STRINGS, "fold": _WIDTH, "fmt": _WIDTH, "expand": _WIDTH,
    "unexpand": _WIDTH, "paste": _PASTE, "column": _COLUMN, "comm": _COMM, "cmp": _CMP,
    "uniq": _UNIQ, "base64": _BASE64, "tree": _TREE, "realpath": _REALPATH,
    "md5sum": _CHECKSUM, "sha1sum": _CHECKSUM, "sha224sum": _CHECKSUM,
    "sha256sum": _CHECKSUM, "sha384sum": _CHECKSUM, "sha512sum": _CHECKSUM,
    "b2sum": _CHECKSUM, "cksum": _CHECKSUM,
    "cat": _EMPTY, "tac": _EMPTY, "rev": _EMPTY, "readlink": _EMPTY,
}  # fmt: skip
"""Commands whose option arities are known; any other command keeps the default model."""


@dataclass(slots=True)
class PathArguments:
    """What :func:`path_arguments` found: paths to check, and doubt it could not resolve."""

    paths: list[str] = field(default_factory=list)
    doubt: str | None = None
    follows: str | None = None
    """The option that makes the command walk its operands following symlinks (``-R``):
    every symlink below them must stay inside too."""


def path_arguments(name: str, args: Sequence[str]) -> PathArguments:
    """The arguments of command ``name`` may open as paths (pure; ``DYNAMIC``: a run-time word).

    A run-time word is never in the result -- the caller treats it as doubt
    for any command that opens paths -- but it still takes its place among
    the operands, so the words around it are read in the right role.
    """
    found = PathArguments()
    if name in NO_PATHS:
        return found
    if name == "find":
        return _find_arguments(args)
    known = PATH_MODELS.get(name)
    model = known or _EMPTY
    posix = "POSIXLY_CORRECT" in os.environ
    options: set[str] = set()
    operands: list[str] = []
    i = 0
    only_operands = False
    while i < len(args):
        arg = args[i]
        i += 1
        if only_operands or arg in (DYNAMIC, "-") or not arg.startswith("-"):
            operands.append(arg)
            only_operands = only_operands or posix
            continue
        if arg == "--":
            only_operands = True
            continue
        if arg.startswith("--"):
            option, has_value, value = arg[2:].partition("=")
            options.add(option)
            if option in model.lists:
                found.doubt = f"{name} --{option} reads a list of paths the check cannot see"
            if option in model.pairs or option in model.name_then_file:
                second = i + 1
                if option in model.name_then_file and second < len(args):
                    found.paths.append(args[second])
                i += 2
                continue
            takes = option in model.long_values or option in model.long_file_values
            if has_value:
                if option not in model.long_values:
                    found.paths.append(value)
            elif takes and i < len(args):
                if option in model.long_file_values:
                    found.paths.append(args[i])
                i += 1
            continue
        i = _short_options(
            model,
            arg,
            args,
            i,
            options=options,
            found=found,
            unknown_command=known is None,
            name=name,
        )
    followed = options & model.follows
    if followed:
        option = min(followed)
        found.follows = f"{name} {'-' if len(option) == 1 else '--'}{option}"
    if name == "diff" and options & {"r", "recursive"} and "no-dereference" not in options:
        found.follows = "diff -r"
    leading = model.leading
    if options & model.leading_given_by or options & model.no_leading:
        leading = 0
    for index, operand in enumerate(operands):
        if index < leading or operand in (DYNAMIC, "-"):
            continue
        if not model.operands:
            continue
        if model.assignments and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", operand, re.DOTALL):
            continue
        found.paths.append(operand)
    return found


def _short_options(
    model: PathModel,
    arg: str,
    args: Sequence[str],
    i: int,
    *,
    options: set[str],
    found: PathArguments,
    unknown_command: bool,
    name: str,
) -> int:
    """Read one cluster of short options; return the index of the next argument."""
    letters = arg[1:]
    for position, letter in enumerate(letters):
        options.add(letter)
        if letter in model.lists:
            found.doubt = f"{name} -{letter} reads a list of paths the check cannot see"
        rest = letters[position + 1 :]
        if letter in model.values or letter in model.file_values:
            if rest:
                if letter in model.file_values:
                    found.paths.append(rest)
            elif i < len(args):
                if letter in model.file_values:
                    found.paths.append(args[i])
                i += 1
            return i
        if unknown_command and rest:
            # The command's options are not modelled: the rest may be this
            # option's value, and a value may be a path.
            found.paths.append(rest)
    return i


_FIND_FILE_PRIMARIES = frozenset({"-newer", "-anewer", "-cnewer", "-samefile"})
_FIND_FILE_LISTS = frozenset({"-files0-from"})
_FIND_FOLLOWS = frozenset({"-L", "-follow"})
_FIND_OPTIONS_BEFORE_PATHS = frozenset({"-H", "-L", "-P"})


def _find_arguments(args: Sequence[str]) -> PathArguments:
    """``find``: the start points, and the file operands of its expression."""
    found = PathArguments()
    i = 0
    while i < len(args) and (args[i] in _FIND_OPTIONS_BEFORE_PATHS or args[i].startswith("-O")):
        if args[i] == "-L":
            found.follows = "find -L"
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    while i < len(args):
        arg = args[i]
        if arg != DYNAMIC and (arg.startswith("-") or arg in ("(", "!", ",", ")")):
            break
        if arg != DYNAMIC:
            found.paths.append(arg)
        i += 1
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _FIND_FILE_LISTS:
            found.doubt = f"find {arg} reads a list of paths the check cannot see"
        if arg in _FIND_FOLLOWS:
            found.follows = f"find {arg}"
        newer = arg.startswith("-newer") and len(arg) == 8 and arg[7] != "t"
        if (arg in _FIND_FILE_PRIMARIES or newer) and i < len(args):
            if args[i] != DYNAMIC:
                found.paths.append(args[i])
            i += 1
    return found


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


# ---------------------------------------------------------------------------
# Brace expansion
# ---------------------------------------------------------------------------


def expand_braces(word: str, limit: int) -> list[str] | None:
    """The words bash's brace expansion makes of ``word`` (None: more than ``limit``).

    Backslash escapes are kept (the glob walk reads them). A ``{...}`` without
    a top-level comma and that is not a sequence (``{1..5}``, ``{a..e}``) is
    literal, as in bash.
    """
    results = [word]
    done: list[str] = []
    while results:
        current = results.pop()
        group = _first_group(current)
        if group is None:
            done.append(current)
            if len(done) > limit:
                return None
            continue
        start, end, alternatives = group
        for alternative in reversed(alternatives):
            results.append(current[:start] + alternative + current[end + 1 :])
        if len(results) + len(done) > limit:
            return None
    done.reverse()
    return done


def _first_group(word: str) -> tuple[int, int, list[str]] | None:
    """The first expandable ``{...}`` of ``word``: its bounds and alternatives."""
    search = 0
    while True:
        start = _unescaped(word, "{", search)
        if start < 0:
            return None
        depth = 0
        commas: list[int] = []
        i = start
        end = -1
        while i < len(word):
            char = word[i]
            if char == "\\":
                i += 2
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = i
                    break
            elif char == "," and depth == 1:
                commas.append(i)
            i += 1
        if end < 0:
            return None
        inner = word[start + 1 : end]
        if commas:
            bounds = [start, *commas, end]
            return start, end, [word[a + 1 : b] for a, b in itertools.pairwise(bounds)]
        sequence = _sequence(inner)
        if sequence is not None:
            return start, end, sequence
        search = start + 1


def _unescaped(word: str, char: str, start: int) -> int:
    i = start
    while i < len(word):
        if word[i] == "\\":
            i += 2
            continue
        if word[i] == char:
            return i
        i += 1
    return -1


def _sequence(inner: str) -> list[str] | None:
    match = _SEQUENCE.fullmatch(inner)
    if match is None:
        return None
    if match.group(4) is not None:
        first, last = ord(match.group(4)), ord(match.group(5))
        step = 1 if last >= first else -1
        return [chr(code) for code in range(first, last + step, step)][: MAX_GLOB_PATHS + 1]
    first, last = int(match.group(1)), int(match.group(2))
    step = abs(int(match.group(3) or 1)) or 1
    step = step if last >= first else -step
    values = range(first, last + (1 if step > 0 else -1), step)
    if len(values) > MAX_GLOB_PATHS:
        return [str(value) for value in values[: MAX_GLOB_PATHS + 1]]
    return [str(value) for value in values]


__all__ = [
    "MAX_GLOB_ENTRIES",
    "NO_PATHS",
    "PATH_MODELS",
    "PathArguments",
    "PathModel",
    "Scope",
    "expand_braces",
    "path_arguments",
    "private_process_path",
]
