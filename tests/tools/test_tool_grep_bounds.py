"""``grep`` stays cancellable and bounded under catastrophic backtracking.

``(a|aa)+$`` against a long run of ``a`` followed by ``b`` backtracks
exponentially: with Python's ``re`` the search cannot be interrupted, and
the tool thread burns a core for hours after its call was cancelled. Here a
cancel, the call's deadline and the per-line budget each end it with a clear
result. Nothing asserts durations: each test waits (with a generous bound
that only catches a hang) for the thread to come back.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.tools import ToolContext, WorkspaceFs, default_registry, invoke_tool
from fore.actors.tools.base import Invocation
from fore.actors.tools.builtin import search
from fore.actors.tools.cancel import CancelToken
from fore.messages.conversation import ToolCall
from fore.messages.tools import CancelToolCalls
from tests.tools.test_tool_pool import (
    WAIT,
    Reports,
    start_pool,
    stats,
    submit,
    wait_until,
)

EVIL = "(a|aa)+$"
EVIL_LINE = "a" * 64 + "b"  # about 10^13 paths: effectively forever without a bound


class SignallingFs(WorkspaceFs):
    """The workspace, telling the test when grep has read a file (its search starts next)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.read = threading.Event()

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        data = super().read_bytes(path, limit)
        self.read.set()
        return data


@pytest.fixture
def evil_tree(tmp_path: Path) -> Path:
    (tmp_path / "evil.txt").write_text(f"fine line\n{EVIL_LINE}\n")
    return tmp_path


def run_grep(ctx: ToolContext, **arguments: Any) -> tuple[threading.Thread, list[Invocation]]:
    out: list[Invocation] = []
    call = ToolCall(id="g", name="grep", arguments={"pattern": EVIL, **arguments})
    thread = threading.Thread(
        target=lambda: out.append(invoke_tool(default_registry(), call, ctx)), daemon=True
    )
    thread.start()
    return thread, out


def context(fs: WorkspaceFs, seconds: float = 300.0) -> ToolContext:
    return ToolContext(
        fs=fs,
        cancel=CancelToken(),
        deadline=time.monotonic() + seconds,
        session_id="s",
        call_id="g",
    )


def test_a_cancel_ends_a_catastrophic_search(evil_tree: Path) -> None:
    fs = SignallingFs(evil_tree)
    ctx = context(fs)
    thread, out = run_grep(ctx)
    assert fs.read.wait(WAIT)  # the search of the evil line is under way
    ctx.cancel.cancel("user pressed stop")
    thread.join(WAIT)
    assert not thread.is_alive(), "grep kept running after it was cancelled"
    (result,) = out
    assert result.outcome == "cancelled"
    assert "user pressed stop" in result.output


def test_the_deadline_ends_a_catastrophic_search(evil_tree: Path) -> None:
    ctx = context(WorkspaceFs(evil_tree), seconds=0.3)
    thread, out = run_grep(ctx)
    thread.join(WAIT)
    assert not thread.is_alive(), "grep ran past its deadline"
    (result,) = out
    assert result.outcome == "error" and result.is_error
    assert "deadline" in result.output and "evil.txt:2" in result.output


def test_a_pathological_line_fails_with_a_clear_error(
    evil_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "GREP_LINE_BUDGET", 0.3)
    thread, out = run_grep(context(WorkspaceFs(evil_tree)))
    thread.join(WAIT)
    assert not thread.is_alive()
    (result,) = out
    assert result.outcome == "error"
    assert "evil.txt:2" in result.output and "backtracks catastrophically" in result.output


def test_grep_keeps_python_regex_syntax(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f(x):\n    return x  # TODO\nclass K: pass\n")
    ctx = context(WorkspaceFs(tmp_path))
    call = ToolCall(
        id="g",
        name="grep",
        arguments={"pattern": r"^(?P<kw>def|class)\s+\w+(?=[(:])", "case_insensitive": True},
    )
    result = invoke_tool(default_registry(), call, ctx)
    assert result.outcome == "ok"
    assert result.output.splitlines() == ["a.py:1: def f(x):", "a.py:3: class K: pass"]
    bad = invoke_tool(
        default_registry(), ToolCall(id="g", name="grep", arguments={"pattern": "(oops"}), ctx
    )
    assert bad.outcome == "error" and "invalid regular expression" in bad.output


def test_a_cancelled_grep_in_the_pool_gives_its_thread_back(
    fresh_runtime: Any, inbox: Any, evil_tree: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = SignallingFs(evil_tree)
    call = ToolCall(id="g", name="grep", arguments={"pattern": EVIL})
    batch = submit(pool, collector, fs, default_registry(), (call,))
    assert fs.read.wait(WAIT)
    assert pool.ask(CancelToolCalls(session_id="s1", call_ids=("g",)), timeout=WAIT) == 1
    assert reports.batch(batch).results[0].outcome == "cancelled"
    # The thread notices its token and returns: the zombie is gone, its slot free.
    wait_until(lambda: stats(pool).zombies == 0)
    assert stats(pool).running == 0


def test_a_timed_out_grep_in_the_pool_gives_its_thread_back(
    fresh_runtime: Any, inbox: Any, evil_tree: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    call = ToolCall(id="g", name="grep", arguments={"pattern": EVIL})
    result = reports.batch(
        submit(
            pool, collector, WorkspaceFs(evil_tree), default_registry(), (call,), call_timeout=0.3
        )
    )
    # The pool's timer and grep's own deadline check end it at the same moment;
    # either way the call ends with a clear result ...
    finished = result.results[0]
    assert finished.outcome == "timeout" or "deadline" in finished.result.output
    # ... and the thread comes back.
    wait_until(lambda: stats(pool).zombies == 0)
    assert stats(pool).running == 0


# -- the literal prefilter: fast, and never wrong ---------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("def main", "def main"),
        (r"qux delta \d+7$", "qux delta "),
        (r"\bTODO\b", "TODO"),
        (r"foo\.bar\(", "foo.bar("),
        ("ab+cd", "cd"),
        ("x[a]y", "xay"),
        ("a|b", None),
        ("(?i)abc", None),
        ("(?:abc)", None),
        ("a{2}bc", None),
        (r"\p{L}+x", None),
        ("[[:alpha:]]", None),
        (".*", None),
        ("abc(", None),  # re cannot parse it: the filter is off, the search reports the error
    ],
)
def test_required_literal(pattern: str, needle: str | None) -> None:
    assert search.required_literal(pattern) == needle
    assert search.required_literal(pattern, ignore_case=True) is None


PIECES = ["a", "b", "c", "ab", " ", ".", r"\d", r"\w", r"\s", r"\b", "^", "$", "a*", "b+"]
PIECES += ["c?", "(ab|c)", "[ab]", "[^a]", "|", r"\.", "1", "(a)", "a+?", "[]a]", r"\-"]


@given(
    pattern=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
    lines=st.lists(st.text(alphabet="abc1 .-]\t", max_size=12), max_size=8),
)
def test_the_literal_prefilter_never_skips_a_matching_line(pattern: str, lines: list[str]) -> None:
    needle = search.required_literal(pattern)
    compiled = regex.compile(pattern)
    for line in lines:
        if compiled.search(line) is not None:
            assert needle is None or needle in line, (pattern, line, needle)
