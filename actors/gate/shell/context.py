"""What every part of the shell walk shares: its limits, its per-call state, a word's value.

Every call is bounded: the input length, the tree size, the walk's depth, the
number of nodes visited and the number of command strings parsed are capped
here, and hitting a cap raises :class:`_Abort` (doubt). :class:`_Context` is
the state of one classification; :class:`_Word` is what the walk knows of a
word. They sit below :mod:`.classify`, :mod:`.redirects` and :mod:`.words`,
which all use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tree_sitter

from fore.actors.gate.rules import Verdict, read_only, unknown
from fore.actors.gate.scope import Scope

MAX_COMMAND_CHARS = 32_768
MAX_TREE_NODES = 20_000
MAX_DEPTH = 150
MAX_VISITS = 20_000
MAX_NESTED_SOURCES = 32
"""Command strings classified per call: the command, ``bash -c``/``eval`` scripts, and
the re-readings of here-document text and ``${...}`` operands (each at most
:data:`MAX_COMMAND_CHARS` long), so the total parsing work is bounded too."""


class _Abort(Exception):
    """A walk limit was hit: the command is too large or too deep to be sure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Word:
    """A word's verdict and, when it is fixed before run time, its literal value.

    ``pattern`` is the word in glob syntax (quoted specials escaped) when its
    only run-time parts are unquoted globs and braces, which the scope check
    expands against the real directories; ``tilde`` says it starts with an
    unquoted ``~``; ``pipe`` that it is a process substitution (a ``/dev/fd``
    pipe, not a file).
    """

    verdict: Verdict
    text: str | None
    pattern: str | None = None
    tilde: bool = False
    pipe: bool = False


@dataclass(slots=True)
class _Context:
    depth: int = 0
    visits: int = 0
    sources: int = 0
    git_reads: bool = False
    reparsed: set[str] = field(default_factory=set)
    """Synthetic here-document sources being classified (each is parsed at most once)."""
    scope: Scope | None = None
    """Where the command may read (None: the workspace is not known, nothing may be read)."""

    def enter(self) -> None:
        self.depth += 1
        self.visits += 1
        if self.depth > MAX_DEPTH:
            raise _Abort("the command is nested too deeply to check")
        if self.visits > MAX_VISITS:
            raise _Abort("the command has too many parts to check")


_READ_ONLY = read_only("the command only reads")


def _exact(token: tree_sitter.Node) -> bool:
    """Whether an anonymous token spans exactly its own spelling.

    tree-sitter-bash's external scanner can fold neighbouring text into a
    token: in ``find . -delete<<EOF`` the ``<<`` token spans ``-delete<<`` and
    the ``-delete`` argument vanishes from the tree. Every token the walker
    passes over is checked, and one that spans more than itself is doubt.
    """
    return token.end_byte - token.start_byte == len(token.type)


_MISLEXED = unknown("the parser folded text into an operator token")
