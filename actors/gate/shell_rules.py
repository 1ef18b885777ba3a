"""Per-command rules of the shell read-only classifier.

The tree walker in :mod:`actors.gate.shell` reduces every simple command to a
literal command name and a list of arguments (``None`` for an argument whose
value is only known at run time: ``$VAR``, a glob, a brace expansion, a tilde).
This module decides what such a command does. It is deliberately a table of
small, explicit rules: a command is read-only only when it is on the allowlist
*and* its arguments pass that command's rule; everything else is ``unknown``
(or ``write`` when we know it writes). The rules encode the holes the reference
implementation had to patch one by one -- ``sort -o``, ``sed -i`` and its ``w``
command, ``find -delete``, ``rg --pre``, ``git branch NAME``, ``git --ext-diff``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum


class Severity(IntEnum):
    """How bad a command is; the classifier always keeps the worst one."""

    READ_ONLY = 0
    UNKNOWN = 1
    WRITE = 2


@dataclass(frozen=True, slots=True)
class Verdict:
    """A severity with the reason a human reads in the gate's decision."""

    severity: Severity
    reason: str


def worst(first: Verdict, *others: Verdict) -> Verdict:
    """The most severe verdict; on a tie the earliest one keeps its reason."""
    result = first
    for other in others:
        if other.severity > result.severity:
            result = other
    return result


def read_only(reason: str) -> Verdict:
    return Verdict(Severity.READ_ONLY, reason)


def unknown(reason: str) -> Verdict:
    return Verdict(Severity.UNKNOWN, reason)


def write(reason: str) -> Verdict:
    return Verdict(Severity.WRITE, reason)


Nested = Callable[[str], Verdict]
"""Classifies a command string found inside another command (``bash -c``, ``eval``)."""

# An argument whose value is only known at run time is handed to the rules as
# this placeholder: it can never equal an option name (the classifier refuses
# NUL characters in commands), so a rule treats it as an ordinary operand.
DYNAMIC = "\x00dynamic"

# ---------------------------------------------------------------------------
# Command tables
# ---------------------------------------------------------------------------

PLAIN_READ_ONLY: frozenset[str] = frozenset(
    {
        # file contents
        "cat", "head", "tail", "wc", "nl", "tac", "rev", "od", "hexdump", "strings",
        "cut", "tr", "fold", "fmt", "expand", "unexpand", "paste", "column", "comm",
        "cmp", "diff",
        "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
        "b2sum", "cksum",
        # searching and listing
        "grep", "egrep", "fgrep", "ls", "stat", "du", "df", "realpath", "readlink",
        "basename", "dirname", "pwd", "which", "type",
        # printing and the environment
        "echo", "printf", "printenv", "whoami", "id", "uname", "nproc", "seq",
        "true", "false", "numfmt",
    }
)  # fmt: skip
"""Commands with no option that writes a file or runs another program."""

DIRECTORY_CHANGES: frozenset[str] = frozenset({"cd", "pushd", "popd"})
"""Change only the shell's own directory; git after them is not probed."""

WRITE_ROOTS: frozenset[str] = frozenset(
    {
        "rm", "rmdir", "mv", "cp", "mkdir", "touch", "chmod", "chown", "chgrp", "ln",
        "link", "unlink", "tee", "dd", "truncate", "shred", "install", "mkfifo",
        "mknod", "rsync", "scp", "patch", "split", "csplit", "fallocate", "mktemp",
        "sponge", "kill", "pkill", "killall",
    }
)  # fmt: skip
"""Commands whose whole purpose is to change files (or processes)."""

WRAPPERS: frozenset[str] = frozenset(
    {
        "env", "xargs", "sudo", "doas", "su", "nice", "nohup", "timeout", "time",
        "command", "builtin", "exec", "stdbuf", "ionice", "chroot", "setsid",
        "watch", "strace", "ltrace", "parallel", "flock", "unbuffer", "nsenter",
    }
)  # fmt: skip
"""Commands that run another command: never read-only, ``write`` if it is visible."""

SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "busybox"})

SCRIPT_SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash"})
"""Shells whose ``-c SCRIPT`` is classified like the script itself (busybox is many programs)."""

_SHELL_SAFE_LETTERS = frozenset("clexu")
"""``-c`` script, ``-l`` login shell (the user's own profile), ``-e``/``-x``/``-u`` (errexit,
trace to stderr, nounset): none of them runs anything the script does not."""
_SHELL_SAFE_LONG = frozenset({"--login", "--noprofile", "--norc"})
_SHELL_SAFE_SETTINGS = frozenset({"pipefail", "errexit", "nounset", "xtrace"})

HARMLESS_ENVIRONMENT: dict[str, re.Pattern[str]] = {
    **dict.fromkeys(
        (
            "LC_ALL", "LC_COLLATE", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME",
            "LC_MONETARY", "LANG",
        ),
        re.compile(r"|[A-Za-z][A-Za-z0-9_@-]*(?:\.[A-Za-z0-9_@-]+)?"),
    ),
    "LANGUAGE": re.compile(r"[A-Za-z][A-Za-z0-9_@-]*(?::[A-Za-z][A-Za-z0-9_@-]*)*|"),
    "TZ": re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*|"),
    "COLUMNS": re.compile(r"[0-9]{1,5}"),
    "LINES": re.compile(r"[0-9]{1,5}"),
    "TABSIZE": re.compile(r"[0-9]{1,3}"),
    **dict.fromkeys(
        ("NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "TERM", "QUOTING_STYLE"),
        re.compile(r"[A-Za-z0-9_+-]*"),
    ),
    **dict.fromkeys(
        ("GREP_COLOR", "GREP_COLORS", "LS_COLORS", "TIME_STYLE"),
        re.compile(r"[A-Za-z0-9_=:;,.%+ -]*"),
    ),
    **dict.fromkeys(
        ("BLOCK_SIZE", "BLOCKSIZE", "DF_BLOCK_SIZE", "DU_BLOCK_SIZE", "LS_BLOCK_SIZE"),
        re.compile(r"[A-Za-z0-9',]*"),
    ),
}  # fmt: skip
"""Variables a ``NAME=value`` may set, with the values allowed: locale, time zone, width,
colour. Everything else is doubt -- ``LD_PRELOAD``, ``PATH``, ``BASH_ENV``, ``GIT_*``,
``PAGER``, ``IFS``, ``GCONV_PATH``, ``GLIBC_TUNABLES`` ... load or run code, and
``POSIXLY_CORRECT`` or ``TMPDIR`` change what the option and path models assume. Values
are held to names: no ``/`` or ``..`` that could point a locale or zone file elsewhere."""


def environment_assignment(name: str, value: str | None) -> Verdict:
    """Whether ``name=value`` (before a command, or on its own) is harmless."""
    allowed = HARMLESS_ENVIRONMENT.get(name)
    if allowed is None:
        return unknown(f"setting {name} can change what commands run or read")
    if value is None:
        return unknown(f"{name} is set to a value only known at run time")
    if not allowed.fullmatch(value) or ".." in value:
        return unknown(f"{name}={value!r} is not a plain value")
    return read_only(f"{name} only sets a locale, zone, width or colour")


# ---------------------------------------------------------------------------
# A small GNU getopt model
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """The options of one GNU-style command, enough to find its dangerous ones.

    GNU getopt accepts clustered short options (``-uo out``), attached values
    (``-oout``, ``--output=out``), options after operands, and any unambiguous
    prefix of a long option (``--out`` is ``--output``); the model follows all of
    that so none of those spellings slips past a rule.
    """

    short_flags: str
    short_with_arg: str
    long_flags: frozenset[str]
    long_with_arg: frozenset[str] = frozenset()
    long_optional_arg: frozenset[str] = frozenset()
    short_optional_arg: str = ""

    def resolve_long(self, name: str) -> str | None:
        """The full long option ``name`` abbreviates, or ``None`` if unknown/ambiguous."""
        names = self.long_flags | self.long_with_arg | self.long_optional_arg
        if name in names:
            return name
        matches = [full for full in names if full.startswith(name)]
        return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True, slots=True)
class ParsedOptions:
    """Options as ``(name, value)`` (short names are one letter) and the operands."""

    options: tuple[tuple[str, str | None], ...]
    operands: tuple[str, ...]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str | None]:
        return [value for name, value in self.options if name in names]


class _BadOption(Exception):
    """An option the model does not know: the command's meaning is in doubt."""


def parse_gnu(args: Sequence[str], spec: OptionSpec) -> ParsedOptions:
    """Parse ``args`` like GNU getopt_long with argument permutation."""
    options: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands.extend(args[i:])
            break
        if arg.startswith("--"):
            raw_name, has_value, value = arg[2:].partition("=")
            name = spec.resolve_long(raw_name)
            if name is None:
                raise _BadOption(arg)
            if name in spec.long_with_arg and not has_value:
                if i >= len(args):
                    raise _BadOption(arg)
                value, has_value = args[i], "="
                i += 1
            options.append((name, value if has_value else None))
        elif arg.startswith("-") and arg != "-":
            j = 1
            while j < len(arg):
                letter = arg[j]
                j += 1
                if letter in spec.short_with_arg:
                    if j < len(arg):
                        options.append((letter, arg[j:]))
                    elif i < len(args):
                        options.append((letter, args[i]))
                        i += 1
                    else:
                        raise _BadOption(arg)
                    break
                if letter in spec.short_optional_arg:
                    options.append((letter, arg[j:] or None))
                    break
                if letter not in spec.short_flags:
                    raise _BadOption(arg)
                options.append((letter, None))
        else:
            operands.append(arg)
    return ParsedOptions(tuple(options), tuple(operands))


def _with_options(
    name: str, spec: OptionSpec, rule: Callable[[ParsedOptions], Verdict]
) -> Callable[[Sequence[str]], Verdict]:
    def apply(args: Sequence[str]) -> Verdict:
        try:
            parsed = parse_gnu(args, spec)
        except _BadOption as exc:
            return unknown(f"{name}: option {exc.args[0]!r} is not understood")
        return rule(parsed)

    return apply


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


def _before_terminator(args: Sequence[str]) -> Sequence[str]:
    """The arguments before ``--``: after it, even ``-o`` is an operand (a file name).

    A ``--`` right after an option is not trusted as the terminator: the
    option may take it as its value (``git log --grep -- --output=x`` greps
    for ``--`` and writes ``x``), so the scan goes on past it.
    """
    for index, arg in enumerate(args):
        if arg == "--" and (index == 0 or not args[index - 1].startswith("-")):
            return args[:index]
    return args


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
    for arg in _before_terminator(args):
        if arg.startswith("--o"):
            return write(f"tree {arg} writes its listing to a file")
        if arg.startswith("-") and not arg.startswith("--") and ("o" in arg or "R" in arg):
            return write("tree -o / -R writes its listing to files")
    return read_only("tree only lists")


_RG_DANGER = ("--pre", "--pre-glob", "--search-zip", "--hostname-bin")


def _rg_rule(args: Sequence[str]) -> Verdict:
    if "RIPGREP_CONFIG_PATH" in os.environ:
        return unknown("rg reads options from RIPGREP_CONFIG_PATH, which the check cannot see")
    for arg in _before_terminator(args):
        name = arg.partition("=")[0]
        if name in _RG_DANGER:
            return unknown(f"rg {name} runs other programs")
        if arg.startswith("-") and not arg.startswith("--") and "z" in arg:
            return unknown("rg -z/--search-zip runs decompression programs")
    return read_only("rg only searches")


# ---------------------------------------------------------------------------
# sed: options and a parser for the script
# ---------------------------------------------------------------------------

_SED = OptionSpec(
    short_flags="nrEsuzb",
    short_with_arg="efl",
    short_optional_arg="i",
    long_flags=frozenset(
        {
            "quiet", "silent", "debug", "posix", "sandbox", "follow-symlinks",
            "null-data", "zero-terminated", "separate", "unbuffered",
            "regexp-extended", "binary", "help", "version",
        }
    ),
    long_with_arg=frozenset({"expression", "file", "line-length"}),
    long_optional_arg=frozenset({"in-place"}),
)  # fmt: skip


def _sed_rule(parsed: ParsedOptions) -> Verdict:
    if parsed.has("i", "in-place"):
        return write("sed -i/--in-place edits files in place")
    if parsed.has("f", "file"):
        return unknown("sed -f reads its script from a file")
    scripts = [value or "" for value in parsed.values("e", "expression")]
    if not scripts:
        if not parsed.operands:
            return unknown("sed without a script")
        scripts = [parsed.operands[0]]
    problem = sed_script_problem("\n".join(scripts))
    if problem is not None:
        return unknown(f"sed script: {problem}")
    return read_only("sed only prints")


class _SedError(Exception):
    pass


_SED_NAIVE, _SED_BRACKET, _SED_BRACKET_ESCAPE = 0, 1, 2
_SED_PLAIN_COMMANDS = frozenset("=dDgGhHnNpPxzF")
_SED_NUMBER_COMMANDS = frozenset("lqQL")
_SED_LABEL_COMMANDS = frozenset("btTv")
_SED_TEXT_COMMANDS = frozenset("aic")
_SED_LABEL_READINGS: tuple[frozenset[str], ...] = (
    frozenset(" \t;}#\n"),  # GNU sed 4.x (read_label)
    frozenset(" \t;\n"),  # busybox
    frozenset(";\n"),  # seds that allow blanks in labels but not ';'
    frozenset("\n"),  # POSIX, BSD: the label is the rest of the line
)
"""Where a label may end, per sed implementation; the GNU reading comes first."""
_SED_DANGEROUS = {
    "e": "the e command runs a shell command",
    "r": "the r command reads a file",
    "R": "the R command reads a file",
    "w": "the w command writes a file",
    "W": "the W command writes a file",
}


def sed_script_problem(script: str) -> str | None:
    """Why ``script`` is not provably harmless, or ``None`` when it is.

    A sed script can write (``w``, ``s///w``), read other files (``r``) and run
    shell commands (``e``, ``s///e``). The parser below walks GNU sed's grammar
    and refuses anything it does not recognise. Where sed implementations
    disagree -- whether a delimiter inside ``[...]`` ends a regex, whether a
    backslash escapes inside brackets, where a label ends -- the script is
    parsed under every reading and must be harmless under all of them.

    Labels matter most: GNU sed ends a label (of ``:``, ``b``, ``t``, ``T``,
    ``v``) at a blank, ``;``, ``}`` or ``#`` and compiles what follows as the
    next command, so ``b end w out`` writes ``out``; busybox ends it at a blank
    or ``;``; POSIX and BSD seds only at the end of the line.
    """
    modes = (_SED_NAIVE, _SED_BRACKET, _SED_BRACKET_ESCAPE) if "[" in script else (_SED_NAIVE,)
    for index, label_stops in enumerate(_SED_LABEL_READINGS):
        labels_seen = False
        for mode in modes:
            # Under another sed's reading a label may swallow a ``}`` (``{p;b}``):
            # that sed then refuses the script as a whole after every command in
            # it was checked here, so an unclosed block at the end is no danger.
            parser = _SedParser(script, mode, label_stops, open_blocks_ok=index > 0)
            try:
                problem = parser.run()
            except _SedError as exc:
                return str(exc)
            if problem is not None:
                return problem
            labels_seen = labels_seen or parser.labels_seen
        if index == 0 and not labels_seen:
            break  # without a label every reading parses the script alike
    return None


class _SedParser:
    def __init__(
        self, script: str, mode: int, label_stops: frozenset[str], *, open_blocks_ok: bool = False
    ) -> None:
        self.s = script
        self.n = len(script)
        self.i = 0
        self.mode = mode
        self.label_stops = label_stops
        self.open_blocks_ok = open_blocks_ok
        self.labels_seen = False

    def peek(self) -> str:
        return self.s[self.i] if self.i < self.n else ""

    def skip_blanks(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1

    def run(self) -> str | None:
        depth = 0
        while True:
            while self.peek() in (" ", "\t", "\n", ";"):
                self.i += 1
            if self.i >= self.n:
                break
            if self.peek() == "#":
                self.skip_line()
                continue
            has_address = self.address()
            self.skip_blanks()
            while self.peek() == "!":
                self.i += 1
                self.skip_blanks()
            command = self.peek()
            if not command:
                raise _SedError("an address without a command")
            self.i += 1
            if command in _SED_DANGEROUS:
                return _SED_DANGEROUS[command]
            if command == "{":
                depth += 1
                continue
            if command == "}":
                depth -= 1
                if depth < 0 or has_address:
                    raise _SedError("unbalanced braces")
                self.end_of_command()
            elif command in _SED_PLAIN_COMMANDS:
                self.end_of_command()
            elif command in _SED_NUMBER_COMMANDS:
                self.skip_blanks()
                while self.peek().isdigit():
                    self.i += 1
                self.end_of_command()
            elif command == ":":
                if has_address or not self.label():
                    raise _SedError("a bad label")
            elif command in _SED_LABEL_COMMANDS:
                self.label()
            elif command in _SED_TEXT_COMMANDS:
                self.text()
            elif command == "s":
                problem = self.substitute()
                if problem is not None:
                    return problem
            elif command == "y":
                delimiter = self.delimiter()
                self.delimited(delimiter, regex=False)
                self.delimited(delimiter, regex=False)
                self.end_of_command()
            else:
                raise _SedError(f"command {command!r} is not understood")
        if depth and not self.open_blocks_ok:
            raise _SedError("unbalanced braces")
        return None

    def skip_line(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = self.n if end < 0 else end + 1

    def label(self) -> str:
        """Read a label under this parser's reading of where labels end.

        The character that ends it is left in place: under the GNU reading a
        blank, ``}`` or ``#`` is followed by more script, which the main loop
        parses -- and checks -- as the next command.
        """
        self.labels_seen = True
        self.skip_blanks()
        start = self.i
        while self.i < self.n and self.s[self.i] not in self.label_stops:
            self.i += 1
        return self.s[start : self.i].strip()

    def text(self) -> None:
        # a/i/c take the rest of the line (``a\`` + newline: the next line too).
        self.skip_blanks()
        if self.s.startswith("\\\n", self.i):
            self.i += 2
        self.skip_line()

    def end_of_command(self) -> None:
        self.skip_blanks()
        char = self.peek()
        if char in ("", "}", "#"):
            return
        if char in (";", "\n"):
            self.i += 1
            return
        raise _SedError(f"unexpected {char!r} after a command")

    def address(self) -> bool:
        if not self.one_address(first=True):
            return False
        self.skip_blanks()
        if self.peek() == ",":
            self.i += 1
            self.skip_blanks()
            if not self.one_address(first=False):
                raise _SedError("a missing second address")
        return True

    def one_address(self, *, first: bool) -> bool:
        char = self.peek()
        if char.isdigit() or (not first and char in ("+", "~")):
            self.i += 1
            while self.peek().isdigit():
                self.i += 1
            if first and self.peek() == "~":
                self.i += 1
                while self.peek().isdigit():
                    self.i += 1
            return True
        if char == "$":
            self.i += 1
            return True
        if char in ("/", "\\"):
            self.i += 1
            delimiter = "/"
            if char == "\\":
                delimiter = self.delimiter()
            self.delimited(delimiter, regex=True)
            while self.peek() in ("I", "M"):
                self.i += 1
            return True
        return False

    def delimiter(self) -> str:
        char = self.peek()
        if char in ("", "\n", "\\"):
            raise _SedError("a bad delimiter")
        self.i += 1
        return char

    def delimited(self, delimiter: str, *, regex: bool) -> None:
        while self.i < self.n:
            char = self.s[self.i]
            if char == "\n":
                raise _SedError("a newline inside a regex or replacement")
            if char == "\\":
                self.i += 2
                continue
            if char == delimiter:
                self.i += 1
                return
            if regex and char == "[" and self.mode != _SED_NAIVE:
                self.bracket()
                continue
            self.i += 1
        raise _SedError("an unterminated regex or replacement")

    def bracket(self) -> None:
        j = self.i + 1
        if j < self.n and self.s[j] == "^":
            j += 1
        if j < self.n and self.s[j] == "]":
            j += 1
        while j < self.n:
            char = self.s[j]
            if char == "\n":
                break
            if char == "[" and j + 1 < self.n and self.s[j + 1] in ":.=":
                close = self.s.find(self.s[j + 1] + "]", j + 2)
                if close < 0:
                    break
                j = close + 2
                continue
            if char == "\\" and self.mode == _SED_BRACKET_ESCAPE:
                j += 2
                continue
            if char == "]":
                self.i = j + 1
                return
            j += 1
        raise _SedError("an unterminated bracket expression")

    def substitute(self) -> str | None:
        delimiter = self.delimiter()
        self.delimited(delimiter, regex=True)
        self.delimited(delimiter, regex=False)
        while True:
            char = self.peek()
            if char == "e":
                return "the s///e flag runs the pattern space as a command"
            if char == "w":
                return "the s///w flag writes a file"
            if char and (char in "gpiImM" or char.isdigit()):
                self.i += 1
                continue
            break
        self.end_of_command()
        return None


# ---------------------------------------------------------------------------
# git
# ---------------------------------------------------------------------------

GIT_READ_ONLY: frozenset[str] = frozenset(
    {
        "status", "log", "diff", "show", "blame", "grep", "ls-files", "rev-parse",
        "describe", "cat-file", "shortlog", "ls-tree", "rev-list", "show-ref",
        "for-each-ref", "merge-base", "name-rev", "count-objects", "diff-tree",
        "diff-index", "diff-files", "check-ignore", "check-attr", "whatchanged",
        "cherry", "show-branch", "version",
    }
)  # fmt: skip

GIT_WRITES: frozenset[str] = frozenset(
    {
        "add", "am", "apply", "bisect", "checkout", "cherry-pick", "clean", "clone",
        "commit", "commit-tree", "fetch", "filter-branch", "format-patch", "gc", "init",
        "merge", "mv", "notes", "prune", "pull", "push", "rebase", "reset", "restore",
        "revert", "rm", "switch", "update-index", "update-ref", "submodule",
        "sparse-checkout", "replace", "repack", "pack-refs", "checkout-index",
        "read-tree", "write-tree", "mktag", "mktree", "fast-import", "maintenance",
        "bundle", "worktree", "stash", "tag", "branch", "remote", "reflog",
    }
)  # fmt: skip
"""Subcommands that change the repository (the listing forms are handled first)."""

_GIT_OUTPUT = "--output"
_GIT_RUNS_PROGRAMS = (
    "--ext-diff",
    "--textconv",
    "--show-signature",
    "--open-files-in-pager",
    "--filters",
    "--help",
)
_GIT_EXACT_SAFE = frozenset({"--text"})  # real options that prefix a dangerous one


def _git_long_matches(name: str, target: str) -> bool:
    # git's option parser accepts unique abbreviations: ``--ext`` is ``--ext-diff``.
    if name == target:
        return True
    return len(name) >= 3 and target.startswith(name) and name not in _GIT_EXACT_SAFE


_GIT_REMERGE = re.compile(r"--remerge-diff|--diff-merges(?:=(?:r|remerge))?$")


def _git_arguments(subcommand: str, args: Sequence[str]) -> Verdict:
    """Options of a read-only git subcommand that write files or run programs."""
    options = _before_terminator(args)
    for index, arg in enumerate(options):
        if arg.startswith("--"):
            name = arg.partition("=")[0]
            if _GIT_REMERGE.match(arg) and (
                "=" in arg
                or name == "--remerge-diff"
                or (index + 1 < len(options) and options[index + 1] in ("r", "remerge"))
            ):
                return unknown(
                    f"git {subcommand} {arg} re-runs merges (merge drivers, temp objects)"
                )
            if name == "--no-index" and subcommand != "diff":
                return unknown(f"git {subcommand} --no-index reads files outside the repository")
            if _git_long_matches(name, _GIT_OUTPUT):
                return write(f"git {subcommand} {name} writes a file")
            for target in _GIT_RUNS_PROGRAMS:
                if _git_long_matches(name, target):
                    return unknown(f"git {subcommand} {target} runs other programs")
        elif arg.startswith("-") and subcommand == "grep" and "O" in arg:
            return unknown("git grep -O opens files in a pager")
        if _runs_gpg(arg):
            return unknown("signature placeholders run gpg")
    return read_only(f"git {subcommand} only reads")


_GPG_PLACEHOLDER = re.compile(r"%G|%\(\*?signature")


def _runs_gpg(arg: str) -> bool:
    """Whether ``arg`` holds a format placeholder that verifies a signature with gpg.

    ``%G?``/``%GS``... in ``--format``/``--pretty``, and the ``for-each-ref``
    atoms ``%(signature...)`` -- also dereferenced, ``%(*signature)`` -- which
    ``git branch``/``git tag``/``git for-each-ref --format`` accept alike.
    """
    return _GPG_PLACEHOLDER.search(arg) is not None


_BRANCH_LIST_FLAGS = frozenset(
    {
        "--all", "--remotes", "--verbose", "--list", "--show-current", "--no-color",
        "--color", "--no-column", "--column", "--ignore-case", "--omit-empty",
        "--no-abbrev", "--abbrev", "--quiet",
    }
)  # fmt: skip
_BRANCH_FILTERS = frozenset(
    {"--contains", "--no-contains", "--merged", "--no-merged", "--points-at"}
)
_BRANCH_WITH_ARG = _BRANCH_FILTERS | {"--sort", "--format"}


@dataclass(frozen=True, slots=True)
class _ListingForm:
    """The options of ``git branch`` or ``git tag`` that keep it a listing."""

    what: str
    flags: frozenset[str]
    with_arg: frozenset[str]
    short_list: str
    short_ok: str
    write_long: frozenset[str]
    write_short: str
    filters: frozenset[str] = _BRANCH_FILTERS
    verify_long: frozenset[str] = frozenset()
    verify_short: str = ""


def _git_listing(form: _ListingForm, args: Sequence[str]) -> Verdict:
    """``git branch`` / ``git tag``: read-only only in their listing forms.

    A positional operand lists only under ``--list`` or a filter option
    (``--contains``, ``--merged`` ...); otherwise ``git branch NAME`` creates.
    """
    what = form.what
    if any(_runs_gpg(arg) for arg in args):
        return unknown(f"git {what}: signature placeholders run gpg")
    listing = False
    operands: list[str] = []
    doubt: Verdict | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands.extend(args[i:])
            break
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            if name in form.write_long:
                return write(f"git {what} {name} changes the repository")
            if name in form.verify_long:
                return unknown(f"git {what} {name} runs gpg")
            if name == "--list":
                listing = True
            elif name in form.with_arg:
                listing = listing or name in form.filters
                if not has_value and i < len(args):
                    i += 1
            elif name not in form.flags:
                doubt = doubt or unknown(f"git {what} {name} is not a listing option")
        elif arg.startswith("-") and arg != "-":
            letters = arg[1:]
            if what == "tag" and letters.startswith("n") and letters[1:] in ("", *"0123456789"):
                continue
            for letter in letters:
                if letter in form.write_short:
                    return write(f"git {what} -{letter} changes the repository")
                if letter in form.verify_short:
                    return unknown(f"git {what} -{letter} runs gpg")
                if letter in form.short_list:
                    listing = True
                elif letter not in form.short_ok:
                    doubt = doubt or unknown(f"git {what} -{letter} is not a listing option")
        else:
            operands.append(arg)
    if operands and not listing:
        return write(f"git {what} NAME creates a {what}")
    return doubt or read_only(f"git {what} lists")


_BRANCH_FORM = _ListingForm(
    what="branch",
    flags=_BRANCH_LIST_FLAGS,
    with_arg=_BRANCH_WITH_ARG,
    short_list="l",
    short_ok="arvqi",
    write_long=frozenset(
        {
            "--delete", "--move", "--copy", "--force", "--set-upstream-to",
            "--unset-upstream", "--edit-description", "--track", "--no-track",
            "--create-reflog", "--recurse-submodules",
        }
    ),
    write_short="dDmMcCfut",
)  # fmt: skip

_TAG_FORM = _ListingForm(
    what="tag",
    flags=frozenset({"--no-column", "--column", "--ignore-case", "--color", "--omit-empty"}),
    with_arg=_BRANCH_WITH_ARG,
    short_list="l",
    short_ok="i",
    write_long=frozenset(
        {
            "--annotate", "--sign", "--no-sign", "--local-user", "--force", "--delete",
            "--message", "--file", "--edit", "--cleanup", "--create-reflog", "--trailer",
        }
    ),
    write_short="asufdmFe",
    verify_long=frozenset({"--verify"}),
    verify_short="v",
)  # fmt: skip


def _git_branch(args: Sequence[str]) -> Verdict:
    return _git_listing(_BRANCH_FORM, args)


def _git_tag(args: Sequence[str]) -> Verdict:
    return _git_listing(_TAG_FORM, args)


_REMOTE_WRITES = frozenset(
    {"add", "rename", "remove", "rm", "set-head", "set-branches", "set-url", "prune", "update"}
)


_REMOTE_SHOW_LOCAL = frozenset({"-n", "--no-query", "-v", "--verbose"})


def _git_remote(args: Sequence[str]) -> Verdict:
    rest = list(args)
    while rest and rest[0] in ("-v", "--verbose"):
        rest.pop(0)
    if not rest:
        return read_only("git remote lists the remotes")
    action, options = rest[0], rest[1:]
    if action in _REMOTE_WRITES:
        return write(f"git remote {action} changes the repository's remotes")
    operands = [arg for arg in options if not arg.startswith("-")]
    flags = {arg for arg in options if arg.startswith("-")}
    if action == "get-url" and flags <= {"--push", "--all"} and len(operands) <= 1:
        return read_only("git remote get-url prints a URL")
    if action == "show" and flags & {"-n", "--no-query"} and flags <= _REMOTE_SHOW_LOCAL:
        return read_only("git remote show -n reads the local configuration")
    if action == "show":
        return unknown("git remote show contacts the remote (use -n)")
    return unknown(f"git remote {action} is not a listing form")


def _git_stash(args: Sequence[str]) -> Verdict:
    if args and args[0] in ("list", "show"):
        return _git_arguments(f"stash {args[0]}", args[1:])
    return write("git stash changes the working tree and refs")


def _git_worktree(args: Sequence[str]) -> Verdict:
    if args and args[0] == "list":
        return read_only("git worktree list lists")
    if not args:
        return unknown("git worktree without a subcommand")
    return write(f"git worktree {args[0]} changes worktrees")


def _git_reflog(args: Sequence[str]) -> Verdict:
    if not args:
        return read_only("git reflog shows the reflog")
    if args[0] in ("expire", "delete", "drop"):
        return write(f"git reflog {args[0]} rewrites the reflog")
    if args[0] == "show":
        return _git_arguments("reflog show", args[1:])
    if args[0] == "exists":
        return read_only("git reflog exists only checks")
    if args[0].startswith("-"):
        return _git_arguments("reflog", args)
    return unknown(f"git reflog {args[0]} is not understood")


_GIT_SPECIAL: dict[str, Callable[[Sequence[str]], Verdict]] = {
    "branch": _git_branch,
    "tag": _git_tag,
    "remote": _git_remote,
    "stash": _git_stash,
    "worktree": _git_worktree,
    "reflog": _git_reflog,
}


GIT_SAFE_GLOBAL_OPTIONS: frozenset[str] = frozenset({"-P", "--no-pager", "--no-optional-locks"})
"""Options before the git subcommand that only make git do less: no pager, no index refresh."""


def _git_global(args: Sequence[str]) -> tuple[int, list[str]]:
    """Skip git's harmless global options; return where the subcommand is and the ``-C`` dirs."""
    index = 0
    directories: list[str] = []
    while index < len(args):
        arg = args[index]
        if arg in GIT_SAFE_GLOBAL_OPTIONS:
            index += 1
        elif arg == "-C" and index + 1 < len(args):
            directories.append(args[index + 1])
            index += 2
        else:
            break
    return index, directories


def _git_rule(args: Sequence[str]) -> Verdict:
    index, _ = _git_global(args)
    if index >= len(args):
        return unknown("git without a subcommand")
    subcommand, rest = args[index], args[index + 1 :]
    if subcommand == "--version" and set(rest) <= {"--build-options"}:
        return read_only("git --version prints git's version")
    if subcommand.startswith("-"):
        return unknown(f"git option {subcommand!r} before the subcommand")
    special = _GIT_SPECIAL.get(subcommand)
    if special is not None:
        return special(rest)
    if subcommand in GIT_READ_ONLY:
        return _git_arguments(subcommand, rest)
    if subcommand in GIT_WRITES:
        return write(f"git {subcommand} changes the repository")
    return unknown(f"git {subcommand!r} is not a known read-only subcommand")


@dataclass(slots=True)
class GitPaths:
    """What a git command opens: ``-C`` directories (in order) and file arguments."""

    directories: list[str]
    paths: list[str]


_GIT_DIFF_FAMILY = frozenset(
    {"diff", "log", "show", "diff-tree", "diff-index", "diff-files", "whatchanged"}
)
_GIT_FILE_OPTIONS: dict[str, tuple[str, frozenset[str]]] = {
    # subcommand: (short letters whose value is a file, long options whose value is a file)
    **dict.fromkeys(_GIT_DIFF_FAMILY, ("O", frozenset({"--orderfile"}))),
    "ls-files": ("X", frozenset({"--exclude-from"})),
    "grep": ("f", frozenset({"--file"})),
    "blame": ("S", frozenset({"--contents", "--ignore-revs-file"})),
}


def git_paths(args: Sequence[str]) -> tuple[GitPaths, str | None]:
    """The paths a read-only git command opens, and doubt (None: none).

    Pathspecs and revisions are not paths here: git refuses a pathspec
    outside its repository. ``git diff`` is the exception -- with a path
    outside the work tree it falls back to ``--no-index`` and prints any two
    files -- so its operands are paths. ``DYNAMIC`` arguments are skipped (the
    caller has refused them already).
    """
    index, directories = _git_global(args)
    found = GitPaths(directories, [])
    if index >= len(args):
        return found, None
    subcommand, rest = args[index], list(args[index + 1 :])
    shorts, longs = _GIT_FILE_OPTIONS.get(subcommand, ("", frozenset()))
    options = _before_terminator(rest)
    operands = rest[len(options) + 1 :] if len(options) < len(rest) else []
    i = 0
    while i < len(options):
        arg = options[i]
        i += 1
        if arg.startswith("--"):
            name, has_value, value = arg.partition("=")
            if name == "--pathspec-from-file":
                return found, f"git {subcommand} {name} reads a list of paths the check cannot see"
            if name in longs:
                if has_value:
                    found.paths.append(value)
                elif i < len(options):
                    found.paths.append(options[i])
                    i += 1
        elif arg.startswith("-") and len(arg) > 1:
            for position, letter in enumerate(arg[1:], start=1):
                if letter in shorts:
                    if position + 1 < len(arg):
                        found.paths.append(arg[position + 1 :])
                    elif i < len(options):
                        found.paths.append(options[i])
                        i += 1
                    break
        elif subcommand == "diff":
            found.paths.append(arg)
    if subcommand == "diff":
        found.paths.extend(operands)
    found.paths = [path for path in found.paths if path != DYNAMIC]
    return found, None


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


# ---------------------------------------------------------------------------
# awk
# ---------------------------------------------------------------------------

AWKS: frozenset[str] = frozenset({"awk", "gawk", "mawk", "nawk"})
_AWK_KEYWORDS_BEFORE_OPERAND = frozenset(
    {"print", "printf", "return", "case", "in", "do", "else", "getline", "delete", "exit"}
)
_AWK_FORBIDDEN = {
    "system": "system() runs a shell command",
    "ARGV": "changing ARGV makes awk read other files",
    "ARGC": "changing ARGC makes awk read other files",
}


def awk_program_problem(program: str) -> tuple[Severity, str] | None:
    """Why an awk program is not provably harmless, or None when it only reads and prints.

    The program is tokenised like awk does -- strings, regular expressions
    (where an operand is expected; elsewhere ``/`` divides) and comments are
    skipped as units -- and then refused for ``system()``, ``@`` (gawk's
    indirect calls, ``@include``, ``@load``), a ``|`` (a pipe to or from a
    command), ``print``/``printf`` with ``>``/``>>`` (a file), ``getline``
    with ``<`` (a file named at run time), and ``ARGV``/``ARGC`` (the files
    awk reads). A ``>`` inside parentheses of a ``print`` may be a comparison,
    but awk implementations disagree, so it is doubt too.
    """
    i = 0
    n = len(program)
    expect_operand = True
    in_print = False
    getline = False
    depth = 0
    while i < n:
        char = program[i]
        if char == "\\" and i + 1 < n and program[i + 1] == "\n":
            i += 2
            continue
        if char in " \t\r":
            i += 1
            continue
        if char in "\n;}{":
            if char in "\n;}":
                in_print = getline = False
                depth = 0
            expect_operand = True
            i += 1
            continue
        if char == "#":
            end = program.find("\n", i)
            i = n if end < 0 else end
            continue
        if char == '"':
            end = _awk_literal_end(program, i, '"')
            if end < 0:
                return Severity.UNKNOWN, "an unterminated string"
            i = end
            expect_operand = False
            continue
        if char == "/" and expect_operand:
            end = _awk_literal_end(program, i, "/")
            if end < 0:
                return Severity.UNKNOWN, "an unterminated regular expression"
            i = end
            expect_operand = False
            continue
        if char.isalpha() or char == "_":
            start = i
            while i < n and (program[i].isalnum() or program[i] == "_"):
                i += 1
            name = program[start:i]
            if name in _AWK_FORBIDDEN:
                return Severity.UNKNOWN, _AWK_FORBIDDEN[name]
            if name in ("print", "printf"):
                in_print = True
                depth = 0
            if name == "getline":
                getline = True
            expect_operand = name in _AWK_KEYWORDS_BEFORE_OPERAND
            continue
        if char.isdigit() or char == ".":
            while i < n and (program[i].isalnum() or program[i] == "."):
                i += 1
            expect_operand = False
            continue
        if char == "@":
            return Severity.UNKNOWN, "@ (an indirect call, @include or @load) is not checked"
        if char == "|":
            if program.startswith("||", i):
                i += 2
                expect_operand = True
                continue
            return Severity.UNKNOWN, "| pipes to or from a command"
        if char == ">" and in_print:
            if depth == 0:
                return Severity.WRITE, "print > FILE writes a file"
            return Severity.UNKNOWN, "a > inside print may redirect to a file"
        if char == "<" and getline:
            return Severity.UNKNOWN, "getline < reads a file named at run time"
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(0, depth - 1)
        expect_operand = char not in ")]$"
        if char == "$":
            expect_operand = True
        i += 1
    return None


def _awk_literal_end(program: str, start: int, quote: str) -> int:
    """The index after the string or regex starting at ``start`` (-1: unterminated)."""
    i = start + 1
    while i < len(program):
        char = program[i]
        if char == "\\":
            i += 2
            continue
        if char == "\n":
            return -1
        if char == quote:
            return i + 1
        i += 1
    return -1


_AWK = OptionSpec(
    short_flags="",
    short_with_arg="Fv",
    long_flags=frozenset(),
    long_with_arg=frozenset({"field-separator", "assign"}),
)
"""The awk options that neither run code nor read or write files: everything else
(``-f``, ``-e``, ``-i``, ``-l``, ``-W exec=``, ``--profile``, ``--dump-variables`` ...)
is doubt."""


def _awk_rule(parsed: ParsedOptions) -> Verdict:
    if not parsed.operands:
        return unknown("awk without a program")
    problem = awk_program_problem(parsed.operands[0])
    if problem is not None:
        severity, reason = problem
        return Verdict(severity, f"awk program: {reason}")
    return read_only("awk only reads and prints")


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------

ARGUMENT_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {
    "find": _find_rule,
    "sed": _with_options("sed", _SED, _sed_rule),
    "sort": _with_options("sort", _SORT, _sort_rule),
    "uniq": _with_options("uniq", _UNIQ, _uniq_rule),
    "date": _with_options("date", _DATE, _date_rule),
    "file": _with_options("file", _FILE, _file_rule),
    "tree": _tree_rule,
    "rg": _rg_rule,
    "git": _git_rule,
    "base64": _with_options("base64", _BASE64, _base64_rule),
    "ps": _ps_rule,
    "jq": _jq_rule,
    **{name: _with_options(name, _AWK, _awk_rule) for name in AWKS},
}
"""Allowlisted commands whose arguments decide; run-time expansions in them are doubt."""


def _shell_rule(name: str, args: Sequence[str | None], nested: Nested) -> Verdict:
    """``bash -c SCRIPT``: as harmless as the script, when nothing else can run.

    Only ``-c`` with a literal script, and the options in
    :data:`_SHELL_SAFE_LETTERS`/:data:`_SHELL_SAFE_LONG` (``-l`` sources the
    user's own profile, as the user's terminal does) are understood; a script
    file, ``-i`` (rc files), ``-O``/``+O`` and anything else is doubt, and so
    is ``BASH_ENV`` in the environment (a file bash sources first).
    """
    floor = unknown(f"{name} runs a shell script")
    script: str | None = None
    command_mode = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg is None:
            return floor
        if arg in _SHELL_SAFE_LONG:
            continue
        if arg == "-o" and index < len(args) and args[index] in _SHELL_SAFE_SETTINGS:
            index += 1
            continue
        if arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            if not set(arg[1:]) <= _SHELL_SAFE_LETTERS:
                return unknown(f"{name} option {arg!r} is not understood")
            command_mode = command_mode or "c" in arg
            continue
        script = arg
        break
    if not command_mode or script is None:
        return floor
    inner = nested(script)
    if name not in SCRIPT_SHELLS or "BASH_ENV" in os.environ:
        return worst(floor, inner)
    return worst(read_only(f"{name} -c runs a read-only script"), inner)


def _wrapper_rule(name: str, args: Sequence[str | None]) -> Verdict:
    for arg in args:
        if arg is not None and os.path.basename(arg) in WRITE_ROOTS:
            return write(f"{name} runs {arg}, which changes files")
    return unknown(f"{name} runs another command")


SYSTEM_DIRECTORIES: frozenset[str] = frozenset({"/usr/bin", "/bin"})
"""Where ``/usr/bin/rg`` is the system's ``rg``: only root can put a program there."""


def command_name(name: str) -> str:
    """The name the rules judge: ``/usr/bin/cat`` and ``/bin/cat`` are ``cat``."""
    directory, _, base = name.rpartition("/")
    if directory in SYSTEM_DIRECTORIES and base:
        return base
    return name


def classify_simple_command(name: str, args: Sequence[str | None], nested: Nested) -> Verdict:
    """Classify one simple command from its literal name and its arguments.

    ``args`` holds ``None`` for an argument only known at run time. ``nested``
    classifies a command string this command would itself run (``bash -c``,
    ``eval``) so a write hidden in there still counts as a write.
    """
    name = command_name(name)
    if "/" in name:
        base = os.path.basename(name)
        if base in WRITE_ROOTS:
            return write(f"{base} changes files")
        return unknown(f"{name!r} is run by path, not from the allowlist")
    if name in WRITE_ROOTS:
        return write(f"{name} changes files")
    rule = ARGUMENT_RULES.get(name)
    if rule is not None:
        verdict = rule([DYNAMIC if arg is None else arg for arg in args])
        if any(arg is None for arg in args):
            return worst(
                verdict, unknown(f"{name} has a shell expansion among arguments it checks")
            )
        return verdict
    if name == "printf" and args and (args[0] is None or args[0].startswith("-v")):
        return unknown("printf -v assigns a shell variable")
    if name in PLAIN_READ_ONLY:
        return read_only(f"{name} only reads")
    if name in DIRECTORY_CHANGES:
        return read_only(f"{name} changes only the shell's directory")
    if name in SHELLS:
        return _shell_rule(name, args, nested)
    if name == "eval":
        floor = unknown("eval runs its arguments as a command")
        if any(arg is None for arg in args):
            return floor
        return worst(floor, nested(" ".join(arg for arg in args if arg is not None)))
    if name in WRAPPERS:
        return _wrapper_rule(name, args)
    return unknown(f"{name!r} is not on the read-only allowlist")
