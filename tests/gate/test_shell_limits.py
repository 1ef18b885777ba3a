"""The classifier's own bounds, tested by what they do rather than by a stopwatch.

The gate runs before every speculative tool call, so a hostile command must
not make classification slow. Rather than assert wall time (speed belongs in
``bench/shell.py``), the classifier bounds its work structurally: the input's
length, the parse tree's size, the walk's depth and number of visits, and the
number of command strings it parses (nested ``bash -c``/``eval`` scripts and
re-read here-document text and ``${...}`` operands). Each limit is tested at
both sides: just inside it the command is classified on its merits, beyond it
the command is ``unknown`` with a reason that names the limit -- and never
``read-only``. A property checks the overall bound: however adversarial the
text, the parser runs a bounded number of times on bounded input.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
import tree_sitter
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.gate.shell import (
    MAX_COMMAND_CHARS,
    MAX_DEPTH,
    MAX_NESTED_SOURCES,
    MAX_TREE_NODES,
    classify,
    classify_shell_command,
    explain_shell_command,
)


def test_input_length() -> None:
    inside = "echo '" + "x" * (MAX_COMMAND_CHARS - len("echo ''")) + "'"
    assert len(inside) == MAX_COMMAND_CHARS
    assert classify_shell_command(inside, None) == "read-only"
    beyond = inside + " "
    verdict = explain_shell_command(beyond, None)
    assert verdict.reason == "the command is too long to check"
    assert classify_shell_command("rm x; " + inside, None) == "unknown"


def _subshells(depth: int, inner: str = "ls") -> str:
    return "( " * depth + inner + " )" * depth


def test_depth() -> None:
    assert classify_shell_command(_subshells(MAX_DEPTH // 4), None) == "read-only"
    assert classify_shell_command(_subshells(MAX_DEPTH // 4, "rm x"), None) == "write"
    deep = explain_shell_command(_subshells(MAX_DEPTH + 1), None)
    assert deep.reason == "the command is nested too deeply to check"
    assert classify_shell_command(_subshells(MAX_DEPTH + 1, "rm x"), None) == "unknown"


def test_tree_size() -> None:
    commands = MAX_TREE_NODES // 4  # command, command_name, word, ';' per `ls;`
    assert classify_shell_command("ls;" * (commands // 2), None) == "read-only"
    verdict = explain_shell_command("ls;" * (commands + 1), None)
    assert len("ls;" * (commands + 1)) <= MAX_COMMAND_CHARS  # the size limit is what trips
    assert verdict.reason == "the command has too many parts to check"


def test_number_of_command_strings() -> None:
    # Each ${x#$(...)} operand is re-read as bash may read it (a few parses).
    few = "echo " + " ".join(["${x#$(rm y)}"] * 2)
    assert classify_shell_command(few, None) == "write"
    many = "echo " + " ".join(["${x#$(ls)}"] * MAX_NESTED_SOURCES)
    verdict = explain_shell_command(many, None)
    assert verdict.reason == "the command holds too many nested command strings to check"
    hidden_write = "echo " + " ".join(["${x#$(ls)}"] * MAX_NESTED_SOURCES + ["$(rm y)"])
    assert classify_shell_command(hidden_write, None) != "read-only"


def test_recursion_in_the_host_is_doubt_not_a_crash() -> None:
    # Far beyond every limit: the walk stops at the first one it meets.
    for command in (
        "echo " + "$(" * 3_000 + "x" + ")" * 3_000,
        "echo " + "${x#" * 3_000 + "$(rm y)" + "}" * 3_000,
        'echo "' + "${x:-'" * 2_000 + "$(rm y)" + "'}" * 2_000 + '"',
    ):
        assert classify_shell_command(command, None) == "unknown"


# ---------------------------------------------------------------------------
# The overall bound: how much parsing one call can cause
# ---------------------------------------------------------------------------


class _CountingParser:
    """Stands in for the thread's tree-sitter parser and records every input."""

    def __init__(self, inner: tree_sitter.Parser, sizes: list[int]) -> None:
        self._inner = inner
        self._sizes = sizes

    def parse(self, source: bytes, *args: Any, **kwargs: Any) -> tree_sitter.Tree:
        self._sizes.append(len(source))
        return self._inner.parse(source, *args, **kwargs)


_ADVERSARIAL = st.text(
    alphabet=st.sampled_from(list("$`'\"\\{}()<>#%:-+=?/^,@ \nabxEOF|;&")), max_size=400
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        _ADVERSARIAL,
        st.tuples(
            st.sampled_from(["echo ${x#", 'echo "${x:-', "cat <<EOF\n${x%"]), _ADVERSARIAL
        ).map("".join),
        st.integers(1, 60).map(lambda n: "echo " + "${x#$'" * n + "$(rm y)" + "'}" * n),
    )
)
def test_parsing_work_is_bounded(command: str) -> None:
    sizes: list[int] = []
    counting = _CountingParser(classify._parser(), sizes)
    with patch.object(classify, "_parser", lambda: counting):
        verdict = explain_shell_command(command, None)
    assert verdict.reason
    # Each command string -- the command, a nested script, a re-read piece --
    # is parsed at most twice (as written, and with its backslash-newlines
    # joined), and none longer than the command limit is parsed at all.
    assert len(sizes) <= 2 * MAX_NESTED_SOURCES
    assert all(size <= MAX_COMMAND_CHARS for size in sizes)


@pytest.mark.parametrize("count", [1, 3])
def test_the_bound_does_not_hide_writes_it_can_see(count: int) -> None:
    command = "echo " + " ".join(["${PWD%$(rm -rf x)}"] * count)
    assert classify_shell_command(command, None) == "write"
