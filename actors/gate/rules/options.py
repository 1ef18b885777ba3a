"""A small model of GNU getopt, shared by the rules of GNU-style commands.

A rule looks for a command's dangerous options; this model finds them under
every spelling GNU getopt accepts (clusters, attached values, abbreviations,
permutation), so a rule cannot be fooled by how an option is written. It is
separate from the rules because several families (coreutils, sed, awk, git)
read options the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fore.actors.gate.rules.verdict import Verdict, unknown


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


def with_options(
    name: str, spec: OptionSpec, rule: Callable[[ParsedOptions], Verdict]
) -> Callable[[Sequence[str]], Verdict]:
    def apply(args: Sequence[str]) -> Verdict:
        try:
            parsed = parse_gnu(args, spec)
        except _BadOption as exc:
            return unknown(f"{name}: option {exc.args[0]!r} is not understood")
        return rule(parsed)

    return apply


def before_terminator(args: Sequence[str]) -> Sequence[str]:
    """The arguments before ``--``: after it, even ``-o`` is an operand (a file name).

    A ``--`` right after an option is not trusted as the terminator: the
    option may take it as its value (``git log --grep -- --output=x`` greps
    for ``--`` and writes ``x``), so the scan goes on past it.
    """
    for index, arg in enumerate(args):
        if arg == "--" and (index == 0 or not args[index - 1].startswith("-")):
            return args[:index]
    return args
