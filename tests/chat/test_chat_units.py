"""``fore chat``'s pure parts: Shift-Tab's cycle, transcript, status line, commands, paths, text.

No terminal and no runtime (the approval policy itself is the runtime's:
``tests/supervision/test_approvals.py``); property tests for the rules that take hostile input
(text from the model, paths the person types).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fore.actors.speculation.suggestion_filter import filter_suggestion
from fore.messages.alerts import Alert, AlertLevel
from fore.messages.conversation import AssistantMessage, SystemMessage, ToolCall, ToolResult
from fore.messages.gate import ApprovalMode
from fore.messages.session import (
    AlertRaised,
    ItemAdded,
    LlmRetried,
    RunStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnResult,
)
from fore.messages.speculation import SpeculationStatus
from fore.supervision.chat.approval import MODE_CYCLE, next_mode, short_arguments
from fore.supervision.chat.commands import Command, UnknownCommand, parse_command
from fore.supervision.chat.demo import ADD_NOTE, ADD_TEST, FIX, OPENING, RUN_TESTS
from fore.supervision.chat.paths import at_word, complete_path, reference_text
from fore.supervision.chat.status import StatusInput, speculation_text, status_line
from fore.supervision.chat.text import one_line, sanitize
from fore.supervision.chat.transcript import (
    MAX_LIVE_CHARS,
    MAX_LIVE_TOOLS,
    MAX_TEXT_CHARS,
    Totals,
    Transcript,
    diff_summary,
    file_changes,
)

S = "s1"


def unsafe(ch: str) -> bool:
    """A character that moves the cursor, reorders text or cannot be encoded."""
    return (
        ch < " "
        or "\x7f" <= ch <= "\x9f"
        or "\ud800" <= ch <= "\udfff"
        or ch in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    )


ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)


def plain(lines: list[Any]) -> list[str]:
    return ["".join(text for _style, text in line) for line in lines]


# -- approval ---------------------------------------------------------------------------------
# The policy (classifier, mode table, asking) is the runtime's: tests/supervision/test_approvals.py.


def test_shift_tab_cycles_through_every_mode_in_claude_codes_order() -> None:
    mode = ApprovalMode.DEFAULT
    seen = []
    for _ in range(4):
        mode = next_mode(mode)
        seen.append(mode)
    assert seen == [ApprovalMode.AUTO_EDIT, ApprovalMode.YOLO, ApprovalMode.PLAN, mode]
    assert mode is ApprovalMode.DEFAULT and set(MODE_CYCLE) == set(ApprovalMode)


@given(ANY_TEXT, st.text(st.characters(codec=None, exclude_categories=()), max_size=50))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_call_summary_is_one_bounded_safe_line(value: str, key: str) -> None:
    for name in ("shell", "edit", "custom"):
        summary = short_arguments(name, {"command": value, "path": value, key: value})
        assert len(summary) <= 72
        assert "\n" not in summary and "\x1b" not in summary and "\r" not in summary
        assert not any(unsafe(ch) for ch in summary)


# -- text ------------------------------------------------------------------------------------


@given(ANY_TEXT)
def test_sanitized_text_has_no_unsafe_characters_but_newlines(text: str) -> None:
    clean = sanitize(text)
    assert not any(unsafe(ch) for ch in clean if ch != "\n")
    clean.encode("utf-8")  # always writable
    assert sanitize(clean) == clean


@given(ANY_TEXT, st.integers(min_value=1, max_value=120))
def test_one_line_is_bounded(text: str, limit: int) -> None:
    line = one_line(text, limit)
    assert len(line) <= limit and "\n" not in line


# -- transcript ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def turn(status: str = "completed", error: str | None = None) -> TurnResult:
    return TurnResult(run_id="r1", session_id=S, status=status, error=error)  # type: ignore[arg-type]


def test_a_streamed_turn_commits_whole_lines_and_keeps_running_tools_live() -> None:
    clock = Clock()
    t = Transcript(clock)
    t.event(RunStarted(session_id=S, run_id="r1", text="hi"))
    t.event(TextDelta(session_id=S, run_id="r1", text="Let me "))
    assert t.commit() == [] and plain(t.live()) == ["Let me "]
    t.event(TextDelta(session_id=S, run_id="r1", text="look.\nStill"))
    assert plain(t.commit()) == ["Let me look."]
    call = ToolCall(id="c1", name="shell", arguments={"command": "make test"})
    t.event(
        ItemAdded(session_id=S, run_id="r1", item=AssistantMessage(text="x", tool_calls=(call,)))
    )  # text streamed already: not repeated
    assert plain(t.commit()) == ["Still"]
    t.event(ToolStarted(session_id=S, run_id="r1", call_id="c1", name="shell"))
    clock.now += 1.5
    assert t.commit() == []
    (live,) = plain(t.live())
    assert "shell  make test  running 1.5 s" in live
    t.event(
        ToolFinished(
            session_id=S,
            run_id="r1",
            call_id="c1",
            name="shell",
            outcome="ok",
            is_error=False,
            duration_s=0.25,
        )
    )
    assert plain(t.commit()) == ["  ✓ shell  make test  250 ms"]
    # the result item comes after: the line is printed once
    t.event(
        ItemAdded(
            session_id=S, run_id="r1", item=ToolResult(call_id="c1", name="shell", output="ok")
        )
    )
    t.event(TurnFinished(session_id=S, result=turn()))
    assert t.commit() == [] and t.live() == []


def test_a_refused_call_and_a_cancelled_turn_say_so() -> None:
    t = Transcript()
    call = ToolCall(id="c1", name="edit", arguments={"path": "a.py"})
    t.event(ItemAdded(session_id=S, run_id="r1", item=AssistantMessage(tool_calls=(call,))))
    skipped = ToolResult(
        call_id="c1", name="edit", output="Skipped: the user refused edit a.py", is_error=True
    )
    t.event(ItemAdded(session_id=S, run_id="r1", item=skipped))
    t.event(TurnFinished(session_id=S, result=turn("cancelled", "cancelled by user")))
    assert plain(t.commit()) == ["  ⊘ edit  a.py  refused", "  ⊘ cancelled"]


def test_an_error_is_one_line_and_alerts_and_retries_show_inline() -> None:
    t = Transcript()
    t.event(TextDelta(session_id=S, run_id="r1", text="partial"))
    t.event(
        LlmRetried(
            session_id=S,
            run_id="r1",
            attempt=1,
            reason="connection broke",
            discard_streamed_text=True,
            discard_chars=7,
        )
    )
    alert = Alert(level=AlertLevel.WARN, text="disk\nfull", source="x")
    t.event(AlertRaised(session_id=S, alert=alert))
    t.event(TurnFinished(session_id=S, result=turn("error", "cannot connect\nto http://x")))
    assert plain(t.commit()) == [
        "  ↻ retrying: connection broke",
        "  ⚠ disk full",
        "  ✗ error: cannot connect to http://x",
    ]


def test_inserted_items_are_not_shown_from_events_but_from_the_accept() -> None:
    t = Transcript()
    t.event(ItemAdded(session_id=S, run_id=None, item=AssistantMessage(text="inserted")))
    assert t.commit() == []
    call = ToolCall(id="c1", name="edit", arguments={"path": "a.py"})
    t.items(
        [
            AssistantMessage(tool_calls=(call,)),
            ToolResult(call_id="c1", name="edit", output="ok"),
            AssistantMessage(text="Done."),
        ],
        speculated=True,
    )
    assert plain(t.commit()) == ["  ✓ edit  a.py  done ahead of time", "Done."]


def test_system_items_are_one_dim_line() -> None:
    t = Transcript()
    t.event(ItemAdded(session_id=S, run_id="r1", item=SystemMessage(text="[file a.py]\n1\n2")))
    assert plain(t.commit()) == ["  · [file a.py]"]


def test_diff_summary_counts_lines_per_file() -> None:
    calls = (
        ToolCall(
            id="a",
            name="edit",
            arguments={"path": "./x.py", "old_string": "a\nb", "new_string": "a\nc\nd"},
        ),
        ToolCall(id="b", name="write_file", arguments={"path": "new.txt", "content": "1\n2\n3\n"}),
        ToolCall(
            id="c",
            name="edit",
            arguments={"path": "failed.py", "old_string": "q", "new_string": "r"},
        ),
    )
    items = [
        AssistantMessage(tool_calls=calls),
        ToolResult(call_id="a", name="edit", output="ok"),
        ToolResult(call_id="b", name="write_file", output="ok"),
        ToolResult(call_id="c", name="edit", output="no match", is_error=True),
    ]
    assert "failed.py" not in file_changes(items)
    lines = plain(diff_summary(items, ["x.py", "new.txt", "other.md"]))
    assert lines == [
        "  ~ x.py  +2 −1",
        "  ~ new.txt  +3 (written whole)",
        "  ~ other.md  changed",
    ]


@given(st.lists(st.text(max_size=80), max_size=40))
# an empty or all-newline delta before the first text, and newlines that turn out trailing
@example(["", "\n0"])
@example(["", "\n", "0"])
@example(["\n", "\n0"])
@example(["a\n", "\n"])
@example(["a", "\n\n", "\n"])
def test_streamed_text_is_never_lost_or_duplicated(chunks: list[str]) -> None:
    t = Transcript()
    printed: list[str] = []
    for chunk in chunks:
        t.event(TextDelta(session_id=S, run_id="r1", text=chunk))
        printed += plain(t.commit())
    t.event(TurnFinished(session_id=S, result=turn()))
    printed += plain(t.commit())
    expected = sanitize("".join(chunks)).lstrip("\n").rstrip("\n")
    assert "".join(printed) == expected.replace("\n", "")
    if all(len(line) < MAX_LIVE_CHARS for line in expected.split("\n")):
        assert "\n".join(printed) == expected


@given(ANY_TEXT, ANY_TEXT, st.sampled_from(["queued", "running", "done", "failed", "skipped"]))
def test_a_tool_line_is_one_bounded_safe_line(name: str, value: str, state: str) -> None:
    from fore.supervision.chat.transcript import ToolBlock, tool_line

    block = ToolBlock(call_id="c", name=name, args=short_arguments(name, {"command": value}))
    block.state = state  # type: ignore[assignment]
    block.started, block.duration_s, block.detail = 1.0, 0.5, "refused"
    text = "".join(t for _s, t in tool_line(block, 2.0))
    assert len(text) <= 40 + 72 + 30
    assert "\n" not in text and not any(unsafe(ch) for ch in text)


def test_the_live_area_stays_a_few_rows_whatever_the_model_does() -> None:
    t = Transcript()
    calls = tuple(ToolCall(id=f"c{i}", name="grep", arguments={"pattern": "x"}) for i in range(100))
    t.event(ItemAdded(session_id=S, run_id="r1", item=AssistantMessage(tool_calls=calls)))
    for call in calls:
        t.event(ToolStarted(session_id=S, run_id="r1", call_id=call.id, name="grep"))
    live = plain(t.live())
    assert len(live) == MAX_LIVE_TOOLS + 1
    assert live[-1] == f"  … {100 - MAX_LIVE_TOOLS} more tool calls"
    u = Transcript()
    u.event(TextDelta(session_id=S, run_id="r1", text="y" * (MAX_LIVE_CHARS * 5 + 7)))
    printed = plain(u.commit())
    assert printed == ["y" * (MAX_LIVE_CHARS * 5 + 7)]
    assert plain(u.live()) == [""]
    v = Transcript()
    v.event(TextDelta(session_id=S, run_id="r1", text="y\n" + "\n" * (MAX_LIVE_CHARS * 5)))
    assert plain(v.commit()) == ["y"]
    assert plain(v.live()) == [""]  # the pending blank lines are not shown (nor printed yet)


def test_an_answer_prints_a_bounded_amount_and_says_how_much_it_left_out() -> None:
    t = Transcript()
    for _ in range(30):
        t.event(TextDelta(session_id=S, run_id="r1", text=("z" * 9_999 + "\n")))
    t.event(TurnFinished(session_id=S, result=turn()))
    printed = plain(t.commit())
    assert sum(len(line) for line in printed[:-1]) <= MAX_TEXT_CHARS
    assert printed[-1] == f"  … {300_000 - MAX_TEXT_CHARS:,} more characters not shown"


def test_a_huge_edit_is_counted_without_a_quadratic_diff() -> None:
    old = "".join(f"old {i}\n" for i in range(3000))
    new = "".join(f"new {i}\n" for i in range(2500))
    call = ToolCall(
        id="a", name="edit", arguments={"path": "big.py", "old_string": old, "new_string": new}
    )
    items = [
        AssistantMessage(tool_calls=(call,)),
        ToolResult(call_id="a", name="edit", output="ok"),
    ]
    assert plain(diff_summary(items, ["big.py"])) == ["  ~ big.py  +2500 −3000"]


# -- status ------------------------------------------------------------------------------------


def status(**fields: Any) -> SpeculationStatus:
    return SpeculationStatus(**fields)


def test_the_speculation_wording() -> None:
    assert speculation_text(None, shown=False, accepting=False) == "no suggestion"
    running = status(state="running", tool_calls=2, files_written=1)
    assert speculation_text(running, shown=True, accepting=False) == (
        "speculating: 2 calls, 1 file"
    )
    ready = status(state="completed", tool_calls=1, files_written=2)
    assert speculation_text(ready, shown=True, accepting=False) == (
        "ready: 1 call, 2 files · Tab applies"
    )
    stopped = status(state="boundary", boundary_tool="shell", boundary_reason="writes")
    assert speculation_text(stopped, shown=True, accepting=False) == (
        "stopped at shell: writes · Tab runs the rest"
    )
    skipped = status(state="skipped", reason="no headroom")
    assert "not speculated (no headroom) · Tab runs it" in speculation_text(
        skipped, shown=True, accepting=False
    )
    assert speculation_text(ready, shown=True, accepting=True) == "applying the suggestion…"


@given(
    model=st.text(max_size=80),
    mode=st.sampled_from(list(ApprovalMode)),
    spec=ANY_TEXT,
    tokens=st.integers(min_value=0, max_value=10**9),
    saved=st.floats(min_value=0, max_value=1e6),
    width=st.integers(min_value=1, max_value=300),
)
def test_the_status_line_fits_the_width(
    *, model: str, mode: ApprovalMode, spec: str, tokens: int, saved: float, width: int
) -> None:
    totals = Totals(main_tokens=tokens, time_saved_s=saved)
    line = status_line(StatusInput(model=model, mode=mode, speculation=spec, totals=totals), width)
    text = "".join(t for _s, t in line)
    assert len(text) <= width and "\n" not in text
    assert not any(unsafe(ch) for ch in text)


# -- commands ----------------------------------------------------------------------------------


def test_slash_commands_parse() -> None:
    assert parse_command("/help") == Command("help")
    assert parse_command("/approval  yolo ") == Command("approval", "yolo")
    assert parse_command("/quit") == Command("exit")
    assert parse_command("fix /help") is None
    assert parse_command("/tmp/x.log is empty, why?") is None
    with pytest.raises(UnknownCommand, match="/help lists them"):
        parse_command("/frobnicate")


@given(st.text(max_size=60))
def test_a_line_is_a_command_only_when_it_starts_with_a_slash_word(line: str) -> None:
    try:
        command = parse_command(line)
    except UnknownCommand:
        assert line.strip().startswith("/")
        return
    if command is not None:
        assert line.strip().startswith("/" + line.strip()[1:].split()[0])


# -- paths ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tree")
    root = base / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("")
    (root / "src" / "api.py").write_text("")
    (root / "my file.txt").write_text("")
    (root / ".hidden").write_text("")
    (base / "secret").mkdir()
    (base / "secret" / "key.txt").write_text("")
    os.symlink(base / "secret", root / "outside")
    os.symlink(root / "src", root / "inside")
    return root


def test_completions_list_the_directory(tree: Path) -> None:
    assert complete_path(tree, "src/a") == ["src/api.py", "src/app.py"]
    assert complete_path(tree, "src/") == ["src/pkg/", "src/api.py", "src/app.py"]
    assert complete_path(tree, "") == ["inside/", "src/", "my file.txt"]
    assert complete_path(tree, ".h") == [".hidden"]
    assert complete_path(tree, "inside/app") == ["inside/app.py"]


def test_completions_never_leave_the_workspace(tree: Path) -> None:
    for partial in ("outside/", "outside/k", "../", "../secret/", "/etc/", "~/", "src/../../"):
        assert complete_path(tree, partial) == [], partial
    assert "outside/" not in complete_path(tree, "o")


@given(st.text(alphabet=st.sampled_from(list("./~\\ac- sruotide\x00")), max_size=24))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_completion_is_inside_the_workspace(tree: Path, partial: str) -> None:
    root = os.path.realpath(tree)
    for path in complete_path(tree, partial):
        assert path.startswith(partial.lstrip("./") if partial.startswith("./") else partial) or (
            partial.startswith("./")
        )
        real = os.path.realpath(os.path.join(root, path))
        assert os.path.commonpath([root, real]) == root, path


def test_references_quote_what_the_tokenizer_needs() -> None:
    from fore.actors.filerefs.tokenizer import parse_input
    from fore.messages.conversation import FileRef

    for path in ("src/app.py", "my file.txt", 'odd"name', "back\\slash"):
        segments = parse_input(f"see {reference_text(path)} now")
        refs = [s for s in segments if isinstance(s, FileRef)]
        assert [r.path for r in refs] == [path]
    assert at_word("see @src/a") == "src/a"
    assert at_word("mail me@x") is None
    assert at_word("@") == ""


# -- the demo's suggestions ------------------------------------------------------------------


def test_every_demo_suggestion_passes_the_suggestion_filter() -> None:
    for text in (OPENING, ADD_TEST, FIX, RUN_TESTS, ADD_NOTE):
        verdict = filter_suggestion(text)
        assert verdict.accepted, (text, verdict.reason)
