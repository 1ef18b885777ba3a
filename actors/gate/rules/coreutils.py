"""Rules of the coreutils-like commands whose arguments decide what they do.

``sort``, ``uniq``, ``date``, ``file``, ``find``, ``tree``, ``rg``, ``base64``,
``ps`` and ``jq``: each is read-only only while none of its options writes a
file or runs a program. Also the table of commands that always change files
(``WRITE_ROOTS``), which ``find -exec`` and the wrappers check against.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from fore.actors.gate.rules.options import (
    OptionSpec,
    ParsedOptions,
    before_terminator,
    with_options,
)
from fore.actors.gate.rules.verdict import Verdict, read_only, unknown, worst, write

WRITE_ROOTS: frozenset[str] = frozenset(
    {
        "rm", "rmdir", "mv", "cp", "mkdir", "touch", "chmod", "chown", "chgrp", "ln",
        "link", "unlink", "tee", "dd", "truncate", "shred", "install", "mkfifo",
        "mknod", "rsync", "scp", "patch", "split", "csplit", "fallocate", "mktemp",
        "sponge", "kill", "pkill", "killall",
    }
)  # fmt: skip
"""Commands whose whole purpose is to change files (or processes)."""


# ---------------------------------------------------------------------------
# sort, uniq, date, file
# ---------------------------------------------------------------------------

_SORT = OptionSpec(
    short_flags="bdfgiMhnRrVcCmsuz",
    short_with_arg="ktoTS",
    long_flags=frozenset(
        {
            "ignore-leading-blanks", "dictionary-order", "ignore-case",
            "general-numeric-sort", "ignore-nonprinting", "month-sort",
            "human-numeric-sort", "numeric-sort", "random-sort", "reverse",
            "version-sort", "debug", "merge", "stable", "unique", "zero-terminated",
            "help", "version",
        }
    ),
    long_with_arg=frozenset(
        {
            "random-source", "sort", "batch-size", "compress-program", "files0-from",
            "key", "output", "buffer-size", "field-separator", "temporary-directory",
            "parallel",
        }
    ),
    long_optional_arg=frozenset({"check"}),
)  # fmt: skip


def _sort_rule(parsed: ParsedOptions) -> Verdict:
    if parsed.has("o", "output"):
        return write("sort -o/--output writes its result to a file")
    if parsed.has("compress-program"):
        return unknown("sort --compress-program runs another program")
    return read_only("sort only prints")


_UNIQ = OptionSpec(
    short_flags="cdDiuz0123456789",
    short_with_arg="fsw",
    long_flags=frozenset(
        {"count", "repeated", "ignore-case", "unique", "zero-terminated", "help", "version"}
    ),
    long_with_arg=frozenset({"skip-fields", "skip-chars", "check-chars"}),
    long_optional_arg=frozenset({"all-repeated", "group"}),
)


def _uniq_rule(parsed: ParsedOptions) -> Verdict:
    if len(parsed.operands) > 1:
        return write("uniq INPUT OUTPUT writes its second operand")
    return read_only("uniq only prints")


_DATE = OptionSpec(
    short_flags="uR",
    short_with_arg="dfrs",
    short_optional_arg="I",
    long_flags=frozenset(
        {"rfc-email", "universal", "utc", "debug", "resolution", "help", "version"}
    ),
    long_with_arg=frozenset({"date", "file", "reference", "set", "rfc-3339"}),
    long_optional_arg=frozenset({"iso-8601"}),
)


def _date_rule(parsed: ParsedOptions) -> Verdict:
    if parsed.has("s", "set"):
        return write("date -s/--set changes the system clock")
    if any(not operand.startswith("+") for operand in parsed.operands):
        return write("date MMDDhhmm sets the system clock")
    return read_only("date only prints")


_FILE = OptionSpec(
    short_flags="bcCdEhiklLNnprsSvzZ0",
    short_with_arg="eFfmP",
    long_flags=frozenset(
        {
            "brief", "checking-printout", "compile", "exclude-quiet", "extension",
            "no-dereference", "mime", "mime-type", "mime-encoding", "keep-going", "list",
            "dereference", "no-pad", "no-buffer", "preserve-date", "raw", "special-files",
            "no-sandbox", "uncompress", "uncompress-noreport", "print0", "apple", "help",
            "version",
        }
    ),
    long_with_arg=frozenset({"exclude", "separator", "files-from", "magic-file", "parameter"}),
)  # fmt: skip


def _file_rule(parsed: ParsedOptions) -> Verdict:
    if parsed.has("C", "compile"):
        return write("file -C/--compile writes a compiled magic file")
    if parsed.has("p", "preserve-date"):
        return unknown("file -p resets access times")
    if parsed.has("z", "Z", "uncompress", "uncompress-noreport", "S", "no-sandbox"):
        return unknown("file -z runs decompressors")
    return read_only("file only prints")


# ---------------------------------------------------------------------------
# find, tree, rg
# ---------------------------------------------------------------------------


_FIND_WRITES = frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})
_FIND_EXECS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find_rule(args: Sequence[str]) -> Verdict:
    verdict = read_only("find only lists")
    for index, arg in enumerate(args):
        if arg in _FIND_WRITES:
            return write(f"find {arg} changes files")
        if arg in _FIND_EXECS:
            target = args[index + 1] if index + 1 < len(args) else ""
            if os.path.basename(target) in WRITE_ROOTS:
                return write(f"find {arg} {target} changes files")
            verdict = worst(verdict, unknown(f"find {arg} runs another program"))
    return verdict


def _tree_rule(args: Sequence[str]) -> Verdict:
    for arg in before_terminator(args):
        if arg.startswith("--o"):
            return write(f"tree {arg} writes its listing to a file")
        if arg.startswith("-") and not arg.startswith("--") and ("o" in arg or "R" in arg):
            return write("tree -o / -R writes its listing to files")
    return read_only("tree only lists")


_RG_DANGER = ("--pre", "--pre-glob", "--search-zip", "--hostname-bin")


def _rg_rule(args: Sequence[str]) -> Verdict:
    if "RIPGREP_CONFIG_PATH" in os.environ:
        return unknown("rg reads options from RIPGREP_CONFIG_PATH, which the check cannot see")
    for arg in before_terminator(args):
        name = arg.partition("=")[0]
        if name in _RG_DANGER:
            return unknown(f"rg {name} runs other programs")
        if arg.startswith("-") and not arg.startswith("--") and "z" in arg:
            return unknown("rg -z/--search-zip runs decompression programs")
    return read_only("rg only searches")


# ---------------------------------------------------------------------------
# base64, ps, jq
# ---------------------------------------------------------------------------

_BASE64 = OptionSpec(
    short_flags="dDi",
    short_with_arg="wob",
    long_flags=frozenset({"decode", "ignore-garbage", "help", "version"}),
    long_with_arg=frozenset({"wrap", "output", "input", "break"}),
)
"""GNU ``base64`` and BSD/macOS ``base64`` (``-o FILE``/``--output``, ``-i FILE``, ``-b N``)."""


def _base64_rule(parsed: ParsedOptions) -> Verdict:
    if parsed.has("o", "output"):
        return write("base64 -o/--output writes a file")
    if len(parsed.operands) > 1:
        return write("base64 INPUT OUTPUT writes its second operand (BSD)")
    return read_only("base64 only prints")


def _ps_rule(args: Sequence[str]) -> Verdict:
    """``ps`` shows other processes' command lines, and with ``e``/``-E`` their environments.

    Both can carry secrets (an API key in an environment, a password on a
    command line) -- the same data as ``/proc/<pid>/environ`` and ``cmdline``,
    which a speculation may not read. So ``ps`` is never read-only; the reason
    names the environment flags when they are there.
    """
    for arg in args:
        bsd = not arg.startswith("-")
        if (bsd and "e" in arg) or (
            arg.startswith("-") and not arg.startswith("--") and "E" in arg
        ):
            return unknown(f"ps {arg} prints other processes' environments, which hold secrets")
        if arg.startswith("--") and ("env" in arg or "format" in arg):
            return unknown(f"ps {arg} may print other processes' environments")
    return unknown("ps shows other processes' command lines, which can hold secrets")


_JQ_MODULES = re.compile(r"\b(?:import|include)\s*\"|\b(?:modulemeta|get_search_list)\b")


def _jq_rule(args: Sequence[str]) -> Verdict:
    """jq only prints -- unless its filter loads modules or data files from its search path."""
    for arg in args:
        if _JQ_MODULES.search(arg):
            return unknown("jq import/include reads modules or data outside the named files")
    return read_only("jq only prints")


COREUTILS_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {
    "find": _find_rule,
    "sort": with_options("sort", _SORT, _sort_rule),
    "uniq": with_options("uniq", _UNIQ, _uniq_rule),
    "date": with_options("date", _DATE, _date_rule),
    "file": with_options("file", _FILE, _file_rule),
    "tree": _tree_rule,
    "rg": _rg_rule,
    "base64": with_options("base64", _BASE64, _base64_rule),
    "ps": _ps_rule,
    "jq": _jq_rule,
}
"""This module's commands by name, for :data:`~fore.actors.gate.rules.dispatch.ARGUMENT_RULES`."""
