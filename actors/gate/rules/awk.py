"""The rule for ``awk`` and its variants: its options, and a scan of its program.

An awk program can run commands (``system()``, pipes), write files
(``print > FILE``) and read files named at run time; the program is
tokenised like awk does and refused for any of those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fore.actors.gate.rules.options import OptionSpec, ParsedOptions, with_options
from fore.actors.gate.rules.verdict import Severity, Verdict, read_only, unknown

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


AWK_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {
    name: with_options(name, _AWK, _awk_rule) for name in AWKS
}
"""The commands of this module, for :data:`~fore.actors.gate.rules.dispatch.ARGUMENT_RULES`."""
