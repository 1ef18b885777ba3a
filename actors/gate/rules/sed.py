"""The rule for ``sed``: its options, and a parser for its script.

A sed script can write files, read files and run shell commands, so the
script itself is parsed (under every reading where sed implementations
disagree). This is the largest rule and has nothing in common with the
others beyond the verdict and the getopt model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fore.actors.gate.rules.options import OptionSpec, ParsedOptions, with_options
from fore.actors.gate.rules.verdict import Verdict, read_only, unknown, write

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


SED_RULES: dict[str, Callable[[Sequence[str]], Verdict]] = {
    "sed": with_options("sed", _SED, _sed_rule),
}
"""The command of this module, for :data:`~fore.actors.gate.rules.dispatch.ARGUMENT_RULES`."""
