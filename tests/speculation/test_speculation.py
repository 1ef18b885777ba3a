"""Suggestions and speculation end to end: real sessions, scripted model and mock server.

Replies are tagged by purpose (``main`` / ``suggestion`` / ``speculation`` /
``pipelined``) so each request takes the reply meant for it.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psutil
import pytest

import fore.testing
from fore.actors.core import PooledActor
from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.speculation.fork import trim_history
from fore.actors.worker.hooks import Continue, Hooks, Skip, ToolCallContext
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.worker import Worker
from fore.messages.conversation import AssistantMessage, SystemMessage, ToolResult, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.messages.runtime import GetChild
from fore.messages.session import EventBase, ItemAdded, Subscribe
from fore.messages.speculation import SpeculationConfig, SpeculationFinished, SuggestionReady
from fore.supervision import Runtime
from tests.processes import descendants

WAIT = 20.0

E = TypeVar("E", bound=EventBase)
MAIN = {"when": {"purpose": "main"}}


def spec(**fields: Any) -> SpeculationConfig:
    """Speculation on, and suggestions shown at once (the display delay has its own test)."""
    fields.setdefault("enabled", True)
    fields.setdefault("suggestion_delay_ms", 0)
    return SpeculationConfig(**fields)


def main_reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {**MAIN, "text": text, "tool_calls": list(calls)}


def suggestion(text: str, purpose: str = "suggestion") -> dict[str, Any]:
    return {"when": {"purpose": purpose}, "text": f'{{"suggestion": "{text}"}}'}


def speculated(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"when": {"purpose": "speculation"}, "text": text, "tool_calls": list(calls)}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


TWO_TURNS = [main_reply("Hello."), main_reply("x is 1. Shall I bump it?")]


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def settled(s: Any) -> str:
    """Wait until the current speculation has finished (any end state)."""
    wait_until(lambda: s.speculation.state in ("completed", "boundary", "failed", "aborted"))
    return str(s.speculation.state)


def first_of(s: Any, kind: type[E]) -> E:
    """The session's first event of ``kind`` from now on, waited for (up to WAIT of quiet).

    Not "every event until a short quiet gap": on a loaded machine the gap comes early.
    """
    found = next((e for e in s.events(timeout=WAIT) if isinstance(e, kind)), None)
    assert found is not None, f"no {kind.__name__} came"
    return found


def next_suggestion(s: Any, text: str) -> None:
    """Wait for the speculation's pipelined suggestion (it never delays completion)."""
    wait_until(lambda: s.speculation.next_suggestion == text)


def tails() -> list[psutil.Process]:
    """This process's live ``tail`` descendants (a speculative ``tail -f``)."""
    return descendants("tail")


class Boom(EventBase):
    """Sent by a test to a speculation's worker it made buggy: a real crash, on cue."""


DEFAULTS: dict[str, Any] = {
    "main": "ok",
    "suggestion": '{"suggestion": null}',
    "speculation": "Done.",
    "pipelined": '{"suggestion": null}',
}


class Replies:
    """A FunctionModel answering by purpose, in order; a test can hold a purpose's next reply.

    Each reply is a string, a script-shaped mapping, or ``fn(request)`` returning
    one; a purpose with no replies left gets its default. ``hold(purpose)``
    returns an Event: the next request of that purpose is answered only once
    the test sets it (event order instead of sleeps). Leaving the ``with``
    block releases everything still held.
    """

    def __init__(self, **replies: list[Any]) -> None:
        self.queues = {purpose: list(items) for purpose, items in replies.items()}
        self.requests: list[LlmRequest] = []
        self.gates: dict[str, threading.Event] = {}
        self.held: list[threading.Event] = []
        self.lock = threading.Lock()
        self.model = FunctionModel(self._decide)

    def __enter__(self) -> Replies:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for gate in self.held:
            gate.set()

    def hold(self, purpose: str) -> threading.Event:
        gate = threading.Event()
        with self.lock:
            self.gates[purpose] = gate
            self.held.append(gate)
        return gate

    def seen(self, purpose: str) -> list[LlmRequest]:
        with self.lock:
            return [r for r in self.requests if r.purpose == purpose]

    def _decide(self, request: LlmRequest) -> Any:
        with self.lock:
            self.requests.append(request)
            queue = self.queues.get(request.purpose, [])
            reply = queue.pop(0) if queue else DEFAULTS[request.purpose]
            gate = self.gates.pop(request.purpose, None)
        if gate is not None:
            gate.wait(WAIT)
        return reply(request) if callable(reply) else reply


def overlay_dirs(rt: Runtime) -> list[Path]:
    process = rt.overlays.process_dir
    if not process.exists():
        return []
    return [p for p in process.iterdir() if p != rt.overlays.journal_dir]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("alpha\n")
    return tmp_path


def bump_script(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *TWO_TURNS,
        suggestion("bump x to 2"),
        speculated("", call("edit", path="app.py", old_string="x = 1", new_string="x = 2")),
        speculated("Bumped x to 2."),
        suggestion("run the tests", purpose="pipelined"),
        *extra,
    ]


# -- suggestions --


def test_a_suggestion_comes_after_the_second_answer_and_not_before(
    runtime: Runtime, ws: Path
) -> None:
    model = ScriptedModel([*TWO_TURNS, suggestion("bump x to 2")])
    with runtime.open_session(workspace=ws, model=model, speculation=spec(speculate=False)) as s:
        s.submit("hi", timeout=WAIT)
        assert s.suggestion is None
        s.submit("what is x?", timeout=WAIT)
        # Had the first answer asked for a suggestion, it would have used up the
        # only scripted suggestion reply, and this one would be silence.
        wait_until(lambda: s.suggestion == "bump x to 2")
        ready = [e for e in s.events(timeout=2) if isinstance(e, SuggestionReady)]
        assert ready and ready[0].suggestion.text == "bump x to 2"


def test_no_suggestion_in_plan_mode_or_after_an_error(runtime: Runtime, ws: Path) -> None:
    """Negative checks made deterministic by event order, not by sleeping.

    Every answer carries a "type X" hint, so a suggestion -- were one made --
    is set while the session supervisor handles the turn's snapshot, with no
    model call in between; and ``s.submit`` is answered through that same
    supervisor only after the worker told it the turn's events (one mailbox,
    FIFO). So right after ``submit`` returns, "no suggestion" is final.
    """
    hinted = "Done. Type `go on` to continue."
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return hinted

    # the control: outside plan mode the same turns offer the hint at once
    with runtime.open_session(
        workspace=ws, model=FunctionModel(decide), speculation=spec(speculate=False)
    ) as s:
        s.submit("a", timeout=WAIT)
        s.submit("b", timeout=WAIT)
        assert s.suggestion == "go on"

    seen.clear()
    plan = spec(approval_mode=ApprovalMode.PLAN)
    with runtime.open_session(workspace=ws, model=FunctionModel(decide), speculation=plan) as s:
        s.submit("a", timeout=WAIT)
        s.submit("b", timeout=WAIT)
        assert s.suggestion is None
        assert s.speculation.state == "idle"  # nothing was speculated either
    assert all(r.purpose == "main" for r in seen)

    from fore.actors.llm import llm_error

    answers = iter(["first", hinted])

    def fail_third(request: LlmRequest) -> Any:
        if request.purpose != "main":
            return '{"suggestion": "go on"}'
        try:
            return next(answers)
        except StopIteration:
            raise llm_error("server", "boom", retryable=False) from None

    with runtime.open_session(
        workspace=ws, model=FunctionModel(fail_third), speculation=spec(speculate=False)
    ) as s:
        s.submit("a", timeout=WAIT)
        s.submit("b", timeout=WAIT)
        assert s.suggestion == "go on"  # the hint: offered at once
        s.keystroke("x")  # typing clears the offer
        assert s.submit("c", timeout=WAIT).status == "error"
        assert s.suggestion is None  # the erroring turn offered nothing (not even the hint)


def test_a_type_hint_in_the_answer_wins_without_a_model_call(runtime: Runtime, ws: Path) -> None:
    seen: list[str] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request.purpose)
        return "Done. Type `deploy now` to ship it."

    with runtime.open_session(
        workspace=ws, model=FunctionModel(decide), speculation=spec(speculate=False)
    ) as s:
        s.submit("a", timeout=WAIT)
        s.submit("b", timeout=WAIT)
        wait_until(lambda: s.suggestion == "deploy now")
    assert "suggestion" not in seen


# -- accept --


class FileProbe(PooledActor):
    """Reads a file whenever an accepted item lands in history."""

    def __init__(self, path: Path, seen: list[tuple[str, str]]) -> None:
        super().__init__()
        self.path = path
        self.seen = seen

    def on_receive(self, message: Any) -> None:
        if isinstance(message, ItemAdded) and isinstance(message.item, UserMessage):
            self.seen.append((message.item.text, self.path.read_text()))


def test_tab_applies_files_before_history_and_cleans_the_overlay(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        assert (ws / "app.py").read_text() == "x = 1\n"  # nothing real before Tab
        next_suggestion(s, "run the tests")
        seen: list[tuple[str, str]] = []
        with runtime.system.activated():
            probe = FileProbe.start(ws / "app.py", seen)
        s._worker.ask(Subscribe(address=probe), timeout=WAIT)
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted"
        assert result.files_applied == ("app.py",)
        assert (ws / "app.py").read_text() == "x = 2\n"
        wait_until(lambda: bool(seen))
        assert seen[0] == ("bump x to 2", "x = 2\n")  # the file was new when history grew
        history = s.history
        assert [type(i).__name__ for i in history[-4:]] == [
            "UserMessage",
            "AssistantMessage",
            "ToolResult",
            "AssistantMessage",
        ]
        assert history[-1].text == "Bumped x to 2."
        assert pairing_problems(history) == []
        assert result.next_suggestion == "run the tests"
        assert s.suggestion == "run the tests"  # the pipelined suggestion is current
        assert result.time_saved_s > 0 and result.accept_latency_s > 0
        probe.stop()
        s.keystroke("something else")
        wait_until(lambda: overlay_dirs(runtime) == [])


def test_submitting_exactly_the_suggestion_takes_the_accept_path(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        turn = s.submit("bump x to 2", timeout=WAIT)
        assert turn.status == "completed"
        assert (ws / "app.py").read_text() == "x = 2\n"
        assert turn.items[-1].text == "Bumped x to 2."


def test_tab_tab_tab_follows_pipelined_suggestions(runtime: Runtime, ws: Path) -> None:
    # The debounce is not the subject here (it has its own test): off.
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT, accept_debounce_ms=0)
    script = bump_script(
        speculated("", call("shell", command="cat app.py")),
        speculated("All good: x = 2."),
        suggestion("commit it", purpose="pipelined"),
    )
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        next_suggestion(s, "run the tests")
        first = s.accept(timeout=WAIT)
        assert first.outcome == "accepted" and first.next_suggestion == "run the tests"
        assert settled(s) == "completed"
        next_suggestion(s, "commit it")
        second = s.accept(timeout=WAIT)
        assert second.outcome == "accepted" and second.suggestion == "run the tests"
        assert second.items[-1].text == "All good: x = 2."
        assert second.next_suggestion == "commit it"
        outputs = [i.output for i in second.items if isinstance(i, ToolResult)]
        assert "x = 2" in outputs[0]  # the second speculation read the applied file


def test_accepts_within_the_debounce_are_ignored(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT, accept_debounce_ms=10_000)
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        assert s.accept(timeout=WAIT).outcome == "accepted"
        assert s.accept(timeout=WAIT).outcome == "debounced"


# -- boundaries --


def test_a_write_in_default_mode_is_a_boundary_and_tab_continues_it(
    runtime: Runtime, ws: Path
) -> None:
    script = [
        *TWO_TURNS,
        suggestion("bump x to 2"),
        speculated(
            "Reading, then editing.",
            call("read_file", path="app.py"),
            call("edit", path="app.py", old_string="x = 1", new_string="x = 2"),
        ),
        main_reply("Bumped for real."),
    ]
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        status = s.speculation
        assert status.boundary_tool == "edit" and "default" in (status.boundary_reason or "")
        assert (ws / "app.py").read_text() == "x = 1\n"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "boundary" and result.boundary_tool == "edit"
        assert result.turn is not None and result.turn.status == "completed"
        assert (ws / "app.py").read_text() == "x = 2\n"  # the refused call ran for real
        history = s.history
        assert pairing_problems(history) == []
        assistant = [i for i in history if isinstance(i, AssistantMessage)][-2]
        assert [c.name for c in assistant.tool_calls] == ["read_file", "edit"]  # restored
        assert history[-1].text == "Bumped for real."


def test_a_denying_pre_tool_call_hook_is_a_boundary(runtime: Runtime, ws: Path) -> None:
    hooks = Hooks()

    def no_reads_of_notes(ctx: ToolCallContext) -> Any:
        return Skip("private") if ctx.arguments.get("path") == "notes.txt" else Continue()

    hooks.pre_tool_call(no_reads_of_notes)
    script = [
        *TWO_TURNS,
        suggestion("read the notes"),
        speculated("", call("read_file", path="notes.txt")),
    ]
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(script), speculation=spec(), hooks=hooks
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        assert "no_reads_of_notes" in (s.speculation.boundary_reason or "")


def test_a_user_edit_during_speculation_is_a_conflict(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    script = bump_script(main_reply("Nothing to bump: x is already 5."))
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        (ws / "app.py").write_text("x = 5\n")  # the user edits the file meanwhile
        result = s.accept(timeout=WAIT)
        assert result.outcome == "conflict" and result.conflicts == ("app.py",)
        assert (ws / "app.py").read_text() == "x = 5\n"  # nothing written
        assert (
            result.turn is not None
            and result.turn.items[-1].text == "Nothing to bump: x is already 5."
        )
        assert any(a.level == "warn" and "app.py" in a.text for a in s.alerts)
        wait_until(lambda: overlay_dirs(runtime) == [])


# -- abort --


def test_typing_aborts_a_slow_speculation_and_removes_everything(
    runtime: Runtime, ws: Path
) -> None:
    script = ScriptFile.model_validate(
        {
            "replies": [
                *TWO_TURNS,
                suggestion("watch the file"),
                {
                    "when": {"purpose": "speculation"},
                    "text": "Watching. " + "word " * 200,
                    "tokens_per_s": 5,
                },
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: any(r.purpose == "speculation" for r in server.requests()))
            before = s.history
            s.keystroke("no, something else")
            report = first_of(s, SpeculationFinished)
            assert report.outcome == "aborted"
            assert report.was_running is True
            assert report.cancel_latency_s is not None and report.cleanup_latency_s is not None
            # timed from the keystroke to the confirmed closes, which precede the removal
            assert 0 < report.cancel_latency_s <= report.cleanup_latency_s
            assert report.abort_steps[0][0] == "keystroke"
            # the cancelled stream's tokens are counted (estimated: no usage ever came)
            assert report.tokens >= report.estimated_tokens > 0
            spec_ids = [r.request_id for r in server.requests() if r.purpose == "speculation"]
            server.wait_for_stats(
                lambda st: spec_ids[-1] in st.disconnected_request_ids, timeout_s=WAIT
            )
            assert s.history == before
            assert (ws / "app.py").read_text() == "x = 1\n"
            wait_until(lambda: overlay_dirs(runtime) == [])
            assert s.speculation.state == "aborted"


def test_typing_kills_a_speculative_tools_process(runtime: Runtime, ws: Path) -> None:
    script = [
        *TWO_TURNS,
        suggestion("follow the notes"),
        speculated("", call("shell", command="tail -f notes.txt")),
    ]

    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: len(tails()) == 1)
        s.keystroke("stop")
        wait_until(lambda: tails() == [])
        wait_until(lambda: overlay_dirs(runtime) == [])
        assert s.speculation.state == "aborted"


def test_typing_a_prefix_of_the_suggestion_keeps_it(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        s.keystroke("bump x")
        assert s.suggestion == "bump x to 2"
        assert s.accept(timeout=WAIT).outcome == "accepted"


def test_a_different_submit_aborts_and_runs_normally(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    script = bump_script(main_reply("Fine, leaving x alone."))
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        turn = s.submit("leave x alone", timeout=WAIT)
        assert turn.items[-1].text == "Fine, leaving x alone."
        assert (ws / "app.py").read_text() == "x = 1\n"
        wait_until(lambda: overlay_dirs(runtime) == [])


def test_a_crashing_speculation_worker_fails_only_its_speculation(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Worker._on_llm_completed

    def broken(self: Worker, message: Any) -> None:
        if self.config.purpose == "speculation":  # a bug in the speculation's agent loop
            raise RuntimeError("speculation bug")
        original(self, message)

    monkeypatch.setattr(Worker, "_on_llm_completed", broken)
    script = bump_script(main_reply("still fine"))
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.speculation.state == "failed")
        assert any(a.level == "info" and "speculation" in a.text for a in s.alerts)
        wait_until(lambda: overlay_dirs(runtime) == [])
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert s.submit("and now?", timeout=WAIT).items[-1].text == "still fine"


# -- forks --


def test_the_fork_prefix_equals_the_main_request_byte_for_byte(runtime: Runtime, ws: Path) -> None:
    script = ScriptFile.model_validate({"replies": [*TWO_TURNS, suggestion("bump x to 2")]})
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(
            workspace=ws, model=model, speculation=spec(speculate=False), system_prompt="Be brief."
        ) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: s.suggestion is not None)
        main, fork = server.requests()[1].body, server.requests()[2].body
        assert isinstance(main, dict) and isinstance(fork, dict)
        assert server.requests()[2].purpose == "suggestion"
        assert fork["tools"] == main["tools"]
        # the fork is the main request, plus its answer, plus the fork's own message
        assert fork["messages"][: len(main["messages"])] == main["messages"]
        assert fork["messages"][len(main["messages"])]["content"] == "x is 1. Shall I bump it?"
        assert fork["messages"][0] == {"role": "system", "content": "Be brief."}


def test_two_sessions_never_see_each_others_snapshot(runtime: Runtime, ws: Path) -> None:
    seen: dict[str, list[LlmRequest]] = {}

    def decide(request: LlmRequest) -> Any:
        seen.setdefault(request.session_id, []).append(request)
        return '{"suggestion": "keep going"}' if request.purpose == "suggestion" else "ok"

    model = FunctionModel(decide)
    with (
        runtime.open_session(workspace=ws, model=model, speculation=spec(speculate=False)) as a,
        runtime.open_session(workspace=ws, model=model, speculation=spec(speculate=False)) as b,
    ):
        for s, tag in ((a, "apples"), (b, "bananas")):
            s.submit(f"{tag} one", timeout=WAIT)
            s.submit(f"{tag} two", timeout=WAIT)
        wait_until(lambda: a.suggestion is not None and b.suggestion is not None)
    for session, mine, other in ((a, "apples", "bananas"), (b, "bananas", "apples")):
        (fork,) = [r for r in seen[session.id] if r.purpose == "suggestion"]
        texts = " ".join(getattr(m, "text", "") for m in fork.messages)
        assert mine in texts and other not in texts


def test_history_trim_never_starts_with_an_orphan_tool_result() -> None:
    items = [
        UserMessage(text="u1"),
        AssistantMessage(text="", tool_calls=(_tc("a"), _tc("b"))),
        ToolResult(call_id="a", name="t", output="1"),
        ToolResult(call_id="b", name="t", output="2"),
        AssistantMessage(text="done"),
        SystemMessage(text="s"),
    ]
    for keep in range(len(items) + 2):
        kept = list(trim_history(items, keep))
        assert kept == items[len(items) - len(kept) :]  # a suffix
        assert len(kept) <= keep
        assert not kept or not isinstance(kept[0], ToolResult)
        assert pairing_problems(kept) == []  # no result without its call
    assert trim_history(items, 3) == (items[4], items[5])  # skipped the two orphans


def _tc(call_id: str) -> Any:
    from fore.messages.conversation import ToolCall

    return ToolCall(id=call_id, name="t", arguments={})


def test_limits_end_a_speculation_at_a_boundary(runtime: Runtime, ws: Path) -> None:
    script = [
        *TWO_TURNS,
        suggestion("look around"),
        *[speculated("", call("list_directory")) for _ in range(5)],
    ]
    config = spec(max_turns=2)
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        assert "turn limit" in (s.speculation.boundary_reason or "")
        assert s.speculation.turns == 2


def test_no_real_file_changes_before_tab_even_with_many_writes(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.YOLO)
    script = [
        *TWO_TURNS,
        suggestion("write the files"),
        speculated(
            "",
            call("write_file", path="new/a.txt", content="A"),
            call("write_file", path="app.py", content="x = 3\n"),
        ),
        speculated("Wrote them."),
    ]
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
        assert after == before and not (ws / "new").exists()
        s.keystroke("nah")
        wait_until(lambda: overlay_dirs(runtime) == [])
    assert {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()} == before


def test_the_tree_shows_a_session_supervisor_with_its_worker_and_controller(
    runtime: Runtime, ws: Path
) -> None:
    script = [
        *TWO_TURNS,
        suggestion("follow the notes"),
        speculated("", call("shell", command="tail -f notes.txt")),
    ]
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.speculation.state == "running")
        sessions = next(c for c in runtime.tree().children if c.id == "sessions")
        node = next(c for c in sessions.children if c.id == f"session:{s.id}")
        assert node.actor_class == "SessionSupervisor"
        kinds = {c.id.split(":")[0]: c.actor_class for c in node.children}
        assert kinds == {"worker": "Worker", "speculation": "SpeculationController"}
        # The running speculation's worker is the controller's (not supervised).
        child = f"speculation:{s.speculation.speculation_id}"
        worker = s.controller.ask(GetChild(child_id=child), timeout=WAIT)
        assert worker is not None
        actor = worker._actor_weakref()
        assert type(actor).__name__ == "Worker" and actor.config.purpose == "speculation"
        s.keystroke("stop")
