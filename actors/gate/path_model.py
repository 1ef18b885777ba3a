"""Which arguments of a shell command it opens as paths.

The scope check (:mod:`fore.actors.gate.scope`) must know which words of a
command are paths before it can resolve them; this module answers that from
the command's options alone (pure: no file system).

Every operand and every option value is a path unless the command's
:class:`PathModel` says otherwise: ``grep``'s first operand is a pattern
(unless ``-e``/``-f`` gave one), ``cut -d/``'s value is a delimiter, ``echo``
opens nothing. The models only ever *exempt* arguments; an option or a
command they do not describe keeps every argument a path, and the value glued
to an unknown short option (``-Xvalue``) is checked in every reading
(``value``, ``alue`` ...). An argument only known at run time (``$x``,
``$(...)``) cannot be resolved, so a command that opens paths and has one is
doubt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from fore.actors.gate.rules import DYNAMIC


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


__all__ = [
    "NO_PATHS",
    "PATH_MODELS",
    "PathArguments",
    "PathModel",
    "path_arguments",
]
