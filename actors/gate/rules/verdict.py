"""The classifier's verdict: a severity and the reason a human reads.

Every rule module returns these; they live apart so the rules, the tree
walker in :mod:`fore.actors.gate.shell` and the path model can all build on
them without importing each other. ``DYNAMIC`` is here for the same reason:
it is how the walker hands a run-time argument to any rule.
"""

from __future__ import annotations

from collections.abc import Callable
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
