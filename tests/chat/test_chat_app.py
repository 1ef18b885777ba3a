"""``fore chat`` in process: the real app, real keys through prompt_toolkit's pipe input.

Each test runs the real :class:`~supervision.chat.app.ChatApp` on its own
asyncio loop (a thread), over a real runtime and session (real tools, overlay,
speculation), with the demo's scripted model unpaced. Keys go in as the
terminal would send them (``\\t``, ``\\x1b``, ``\\x03`` ...); what the person
would see is read from the app's state and from the lines it printed. Waits
are bounded polls of a screen state, never timing assertions.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from fore.actors.llm import FunctionModel, OpenAICompatible, RetryPolicy, ScriptReply
from fore.actors.worker.approval import ApprovalDecision, ApprovalRequest
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.supervision.chat.app import ChatApp
from fore.supervision.chat.backend import BackendConfig, SessionBackend, chat_runtime
from fore.supervision.chat.demo import (
    ADD_NOTE,
    ADD_TEST,
    FIX,
    OPENING,
    RUN_TESTS,
    DemoModel,
    Pace,
    make_workspace,
)
from fore.supervision.runtime import Runtime
from tests.speculation.attacks import Held, controller_of, queued_at

WAIT = 60.0
FAST = Pace(main_ttft_ms=None, main_tokens_per_s=None, fork_ttft_ms=None, slow_tokens_per_s=4.0)

TAB, ESC, CTRL_C, CTRL_D, SHIFT_TAB, ENTER = "\t", "\x1b", "\x03", "\x04", "\x1b[Z", "\r"


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Chat:
    """One ChatApp on a pipe input, run on a thread of its own."""

    def __init__(
        self,
        runtime: Runtime,
        workspace: Path,
        model: Any,
        *,
        mode: ApprovalMode = ApprovalMode.AUTO_EDIT,
        opening: str | None = None,
        label: str = "",
    ) -> None:
        self.runtime = runtime
        self.workspace = workspace
        self._pipe_cm = create_pipe_input()
        self.pipe = self._pipe_cm.__enter__()
        holder: list[ChatApp] = []

        def approver(request: ApprovalRequest) -> ApprovalDecision:
            return holder[0].approver(request) if holder else ApprovalDecision.DENY

        self.backend = SessionBackend(
            runtime,
            BackendConfig(workspace=workspace, model=model, model_label=label, mode=mode),
            approver,
        )
        self.app = ChatApp(self.backend, opening=opening, input=self.pipe, output=DummyOutput())
        holder.append(self.app)
        self.code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="chat-test-app", daemon=True)
        self.thread.start()
        wait_for(lambda: self.app.app.is_running, "the app to start")

    def _run(self) -> None:
        try:
            self.code = asyncio.run(self.app.run_async())
        except BaseException as exc:  # reported by close()
            self.error = exc

    def keys(self, text: str) -> None:
        self.pipe.send_text(text)

    def state(self) -> str:
        app = self.app
        return (
            f"busy={app.busy} ghost={app.ghost!r} spec={app.spec_status} hint={app.hint!r} "
            f"approvals={len(app.approvals)} buffer={app.buffer.text!r}\n" + self.printed()
        )

    def wait(self, predicate: Callable[[], Any], what: str) -> Any:
        try:
            return wait_for(predicate, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.state()}") from None

    def printed(self) -> str:
        return "\n".join(self.app.printed)

    def wait_printed(self, text: str, what: str | None = None) -> None:
        self.wait(lambda: text in self.printed(), what or f"{text!r} on screen")

    def wait_idle(self) -> None:
        self.wait(lambda: self.app.busy is None, "the turn to end")

    def wait_ghost(self, text: str) -> None:
        self.wait(lambda: self.app.ghost == text, f"the suggestion {text!r}")

    def wait_spec(self, *states: str) -> None:
        def reached() -> bool:
            status = self.app.spec_status
            return status is not None and status.state in states

        self.wait(reached, f"the speculation to be {'/'.join(states)}")

    def overlays(self) -> list[str]:
        root = self.runtime.overlays.process_dir
        if not root.exists():
            return []
        return sorted(p.name for p in root.iterdir() if p.name != "journal")

    def close(self) -> None:
        if self.thread.is_alive():
            loop = self.app._loop
            if loop is not None:
                loop.call_soon_threadsafe(self.app._leave)
            self.thread.join(WAIT)
        self.backend.close()
        self._pipe_cm.__exit__(None, None, None)
        assert not self.thread.is_alive(), "the app did not end"
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="module")
def fore_chat_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    """The runtime ``fore chat`` itself runs on (:func:`chat_runtime`: its process tuning too)."""
    rt = chat_runtime(name="chat-app-test", overlay_root=tmp_path_factory.mktemp("overlays"))
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)


@pytest.fixture
def demo_ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "demo")


@pytest.fixture
def open_chat(fore_chat_runtime: Runtime, demo_ws: Path) -> Iterator[Callable[..., Chat]]:
    chats: list[Chat] = []

    def start(**options: Any) -> Chat:
        model = options.pop("model", None) or DemoModel(FAST).model()
        workspace = options.pop("workspace", demo_ws)
        chat = Chat(fore_chat_runtime, workspace, model, **options)
        chats.append(chat)
        return chat

    yield start
    for chat in chats:
        chat.close()


def second_answer(chat: Chat) -> None:
    """The demo's opening answer, then any prompt: the second answer brings a suggestion."""
    chat.wait_printed("no test covers that yet", "the opening answer")
    chat.wait_idle()
    chat.keys("hi" + ENTER)
    chat.wait_printed("I am the demo's scripted model")


def test_the_suggestion_shows_and_tab_applies_the_speculated_edit_then_chains(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(opening=OPENING)
    second_answer(chat)
    chat.wait_ghost(ADD_TEST)
    chat.wait_spec("completed")
    assert "test_empty_title" not in (demo_ws / "tests/test_slug.py").read_text()
    chat.keys(TAB)
    chat.wait(
        lambda: "test_empty_title" in (demo_ws / "tests/test_slug.py").read_text(),
        "the speculated edit on disk",
    )
    chat.wait_printed("~ tests/test_slug.py  +3 −0", "the per-file diff summary")
    assert f"› {ADD_TEST}  (Tab)" in chat.printed()
    assert "✓ edit  tests/test_slug.py  done ahead of time" in chat.printed()
    # Tab-Tab: the pipelined suggestion is offered, speculated, and applied in turn.
    chat.wait_ghost(FIX)
    chat.wait_spec("completed")
    chat.keys(TAB)
    chat.wait(
        lambda: "untitled" in (demo_ws / "textkit/slug.py").read_text(),
        "the second speculated edit on disk",
    )
    chat.wait_printed("~ textkit/slug.py  +1 −1")
    assert chat.app.totals.time_saved_s > 0


def test_typing_aborts_the_speculation_and_removes_the_ghost(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(opening=OPENING)
    second_answer(chat)
    chat.wait_ghost(ADD_TEST)
    chat.wait_spec("completed")
    assert chat.overlays(), "a finished speculation keeps its overlay until Tab or a key"
    chat.keys("a")  # even the suggestion's own first letter throws it away
    chat.wait(lambda: chat.app.ghost is None, "the ghost to go")
    # The key handler drops the ghost, then inserts the key: read from this thread, the
    # buffer may lag the ghost by that one step, so wait for it (bounded) rather than race.
    chat.wait(lambda: chat.app.buffer.text == "a", "the typed key in the prompt")
    assert chat.app.buffer.text == "a"
    chat.wait(lambda: chat.app.totals.aborted == 1, "the speculation to report aborted")
    chat.wait(lambda: chat.overlays() == [], "the overlay to be removed")
    assert "test_empty_title" not in (demo_ws / "tests/test_slug.py").read_text()


def test_esc_clears_the_suggestion(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat(opening=OPENING)
    second_answer(chat)
    chat.wait_ghost(ADD_TEST)
    chat.keys(ESC)
    chat.wait(lambda: chat.app.ghost is None, "Esc to clear the ghost")
    chat.wait(lambda: chat.app.totals.aborted == 1, "the speculation to report aborted")
    chat.wait(lambda: chat.overlays() == [], "the overlay to be removed")
    chat.keys(TAB)  # nothing to accept now: Tab does nothing
    assert chat.app.busy is None


def test_ctrl_c_cancels_a_running_turn_and_the_prompt_stays_usable(
    open_chat: Callable[..., Chat],
) -> None:
    chat = open_chat()
    chat.keys("count slowly" + ENTER)
    chat.wait(
        lambda: any("Counting" in t for _s, t in sum(chat.app.transcript.live(), ())),
        "the slow answer to stream",
    )
    chat.keys(CTRL_C)
    chat.wait_printed("⊘ cancelled")
    chat.wait_idle()
    assert chat.thread.is_alive()
    chat.keys("hello" + ENTER)
    chat.wait_printed("I am the demo's scripted model", "an answer after the cancel")
    chat.keys(CTRL_C)  # idle, empty prompt: arms
    assert chat.thread.is_alive()
    chat.keys(CTRL_C)  # the second leaves
    chat.thread.join(WAIT)
    assert not chat.thread.is_alive()


def test_a_prompt_sent_while_a_turn_runs_is_queued_and_sent_after_it(
    open_chat: Callable[..., Chat],
) -> None:
    chat = open_chat(model=DemoModel(Pace()).model())  # paced: the first turn takes a while
    chat.keys("hi" + ENTER + "second" + ENTER)
    chat.wait_printed("› second  (queued)")
    chat.wait(lambda: chat.printed().count("I am the demo's scripted model") == 2, "both answers")
    assert chat.printed().index("› hi") < chat.printed().index("› second")


def test_ctrl_c_takes_a_queued_prompt_back(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat()
    chat.keys("count slowly" + ENTER)
    chat.wait(lambda: chat.app.busy == "turn", "the slow turn")
    chat.keys("next one" + ENTER)
    chat.wait(lambda: chat.app.queued == "next one", "the queued prompt")
    chat.keys(CTRL_C)
    chat.wait_printed("⊘ cancelled")
    chat.wait(lambda: chat.app.buffer.text == "next one", "the prompt back in the line")
    assert "› next one" not in chat.printed()


def test_ctrl_d_leaves(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat()
    chat.keys(CTRL_D)
    chat.thread.join(WAIT)
    assert not chat.thread.is_alive() and chat.code == 0


def test_default_mode_asks_before_a_write_and_n_refuses_it(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(mode=ApprovalMode.DEFAULT)
    before = (demo_ws / "tests/test_slug.py").read_text()
    chat.keys(ADD_TEST + ENTER)
    chat.wait(lambda: chat.app.approvals, "the approval prompt")
    request = chat.app.approvals[0].request
    assert (request.tool, request.summary) == ("edit", "tests/test_slug.py")
    chat.keys("n")
    chat.wait_printed("I left the files as they were")
    assert (demo_ws / "tests/test_slug.py").read_text() == before
    assert "⊘ edit  tests/test_slug.py  refused" in chat.printed()


def test_default_mode_y_allows_and_always_stops_asking(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(mode=ApprovalMode.DEFAULT)
    chat.keys(ADD_TEST + ENTER)
    chat.wait(lambda: chat.app.approvals, "the approval prompt")
    chat.keys("a")  # always, for edit
    chat.wait_printed("Added `test_empty_title`")
    assert "test_empty_title" in (demo_ws / "tests/test_slug.py").read_text()
    chat.wait_idle()
    chat.keys(FIX + ENTER)
    chat.wait_printed("slugify now returns")
    assert "untitled" in (demo_ws / "textkit/slug.py").read_text()
    approval = chat.backend.session.approval
    assert approval is not None and "edit" in approval.always


def test_in_default_mode_the_speculation_stops_before_the_edit_and_tab_asks(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(mode=ApprovalMode.DEFAULT, opening=OPENING)
    second_answer(chat)
    chat.wait_ghost(ADD_TEST)
    chat.wait_spec("boundary")
    assert chat.app.spec_status is not None and chat.app.spec_status.boundary_tool == "edit"
    chat.keys(TAB)
    chat.wait(lambda: chat.app.approvals, "the approval prompt after Tab")
    chat.keys("y")
    chat.wait(
        lambda: "test_empty_title" in (demo_ws / "tests/test_slug.py").read_text(),
        "the edit, approved, on disk",
    )
    chat.wait_printed("nothing ran ahead of time: the speculation stopped at edit")


def test_plan_mode_refuses_writes_without_asking(
    open_chat: Callable[..., Chat], demo_ws: Path
) -> None:
    chat = open_chat(mode=ApprovalMode.PLAN)
    chat.keys(ADD_TEST + ENTER)
    chat.wait_printed("I left the files as they were")
    assert not chat.app.approvals
    assert "test_empty_title" not in (demo_ws / "tests/test_slug.py").read_text()


def test_shift_tab_cycles_the_mode_and_a_stricter_mode_drops_the_suggestion(
    open_chat: Callable[..., Chat],
) -> None:
    chat = open_chat(opening=OPENING)
    second_answer(chat)
    chat.wait_ghost(ADD_TEST)
    chat.wait_spec("completed")
    chat.keys(SHIFT_TAB)  # auto-edit -> yolo: more permissive, the ghost stays
    chat.wait(lambda: chat.backend.mode is ApprovalMode.YOLO, "yolo")
    assert chat.app.ghost == ADD_TEST
    chat.keys(SHIFT_TAB)  # -> plan: stricter, the edit it speculated is not allowed now
    chat.wait(lambda: chat.backend.mode is ApprovalMode.PLAN, "plan")
    chat.wait(lambda: chat.app.ghost is None, "the ghost to go")
    chat.wait(lambda: chat.overlays() == [], "the overlay to be removed")
    chat.keys(SHIFT_TAB)
    chat.wait(lambda: chat.backend.mode is ApprovalMode.DEFAULT, "default")
    chat.keys("/approval auto-edit" + ENTER)
    chat.wait(lambda: chat.backend.mode is ApprovalMode.AUTO_EDIT, "/approval auto-edit")


class HeldSpeculation:
    """The demo model, with every speculation request held until released."""

    def __init__(self) -> None:
        self.demo = DemoModel(FAST)
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: LlmRequest) -> ScriptReply:
        if request.purpose == "speculation":
            self.running.set()
            self.release.wait(WAIT)
        return self.demo(request)


@pytest.mark.parametrize("order", ["tab first", "ctrl-c overtakes tab"])
def test_ctrl_c_calls_off_a_tab_waiting_on_a_running_speculation(
    open_chat: Callable[..., Chat], demo_ws: Path, order: str
) -> None:
    """Ctrl-C after Tab calls the Tab off, also when the cancel overtakes the Tab in the
    controller's mailbox (as it may under load: Ctrl-C rides the control lane)."""
    held = HeldSpeculation()
    chat = open_chat(opening=OPENING, model=FunctionModel(held, name="fore-demo"))
    try:
        second_answer(chat)
        chat.wait_ghost(ADD_TEST)
        chat.wait(held.running.is_set, "the speculation to run")
        chat.wait_spec("running")
        if order == "tab first":
            chat.keys(TAB)
            chat.wait(lambda: chat.app.busy == "accept", "Tab waiting for the speculation")
            chat.keys(CTRL_C)
        else:
            controller = controller_of(chat.backend.session)
            with Held(controller):
                chat.keys(TAB)
                queued_at(controller, "AcceptSuggestion")
                chat.keys(CTRL_C)
                chat.wait(lambda: "cancelling" in chat.app.hint, "Ctrl-C handled")
        chat.wait_printed("(the speculation was called off)")
        chat.wait_idle()
    finally:
        held.release.set()  # it would finish now: nothing may be applied
    chat.wait(lambda: chat.overlays() == [], "the overlay to be removed")
    assert "test_empty_title" not in (demo_ws / "tests/test_slug.py").read_text()
    assert chat.thread.is_alive()
    chat.keys("hello" + ENTER)
    chat.wait_printed("I am the demo's scripted model", "a turn after the call-off")


def test_model_switches_an_openai_compatible_session(
    open_chat: Callable[..., Chat], tmp_path: Path
) -> None:
    from fore.testing import MockLlmServer

    with MockLlmServer() as server:
        model = OpenAICompatible(base_url=server.base_url, model="first-model", api_key="k")
        chat = open_chat(model=model, workspace=tmp_path, label="first-model")
        chat.keys("/model second-model" + ENTER)
        chat.wait_printed("model: second-model (was first-model)")
        chat.keys("hello" + ENTER)
        chat.wait_idle()
        sent = chat.wait(server.requests, "the request")
        assert [r.body["model"] for r in sent] == ["second-model"]
        assert chat.backend.model_label == "second-model"


def test_model_says_why_a_scripted_model_cannot_switch(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat(label="fore-demo")
    chat.keys("/model gpt-5" + ENTER)
    chat.wait_printed("✗ /model gpt-5: this session's model (fore-demo) is scripted")
    assert chat.backend.model_label == "fore-demo"


def test_tab_on_a_shell_boundary_runs_the_command_after_asking(
    open_chat: Callable[..., Chat],
) -> None:
    chat = open_chat()
    chat.keys("hi" + ENTER)
    chat.wait_printed("I am the demo's scripted model")
    chat.wait_idle()
    chat.keys(RUN_TESTS + ENTER)  # the second answer: the next suggestion is the tour's
    chat.wait(lambda: chat.app.approvals, "the shell approval (auto-edit asks for commands)")
    assert chat.app.approvals[0].request.summary == "python3 -m unittest -q"
    chat.keys("y")
    chat.wait_printed("✓ shell  python3 -m unittest -q")
    chat.wait_ghost(OPENING)  # the tour's first step not yet asked


def test_at_completes_workspace_paths(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat()
    chat.keys("see @tex")
    chat.wait(
        lambda: (
            chat.app.buffer.complete_state is not None
            and chat.app.buffer.complete_state.completions
        ),
        "the completion menu",
    )
    chat.keys(TAB)
    chat.wait(lambda: chat.app.buffer.text == "see @textkit/", "the completed directory")
    chat.keys(ENTER)  # takes the completion, does not send
    assert chat.app.busy is None and chat.app.buffer.text == "see @textkit/"


def test_tab_completes_an_at_path_without_waiting_for_the_menu(
    open_chat: Callable[..., Chat],
) -> None:
    chat = open_chat()
    chat.keys("see @textkit/sl" + TAB)
    chat.wait(lambda: chat.app.buffer.text == "see @textkit/slug.py", "the completed file")


def test_history_up_recalls_the_last_prompt(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat()
    chat.keys("first prompt" + ENTER)
    chat.wait_printed("I am the demo's scripted model")
    chat.wait_idle()
    chat.keys("\x1b[A")  # Up
    chat.wait(lambda: chat.app.buffer.text == "first prompt", "the recalled prompt")


def test_slash_commands(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat(label="fore-demo")
    chat.keys("/help" + ENTER)
    chat.wait_printed("Shift-Tab  cycle the approval mode")
    chat.keys("/model" + ENTER)
    chat.wait_printed("model: fore-demo")
    chat.keys("/cost" + ENTER)
    chat.wait_printed("time saved by Tab")
    chat.keys("/nope" + ENTER)
    chat.wait(lambda: "unknown command /nope" in chat.app.hint, "the unknown-command hint")
    assert chat.app.busy is None


def test_clear_starts_a_new_conversation(open_chat: Callable[..., Chat]) -> None:
    chat = open_chat(opening=OPENING)
    chat.wait_printed("no test covers that yet")
    chat.wait_idle()
    first = chat.backend.session
    chat.keys("/clear" + ENTER)
    chat.wait_printed("(a new conversation)")
    assert chat.backend.session is not first and first.closed
    chat.keys("hi" + ENTER)  # the first answer of the new conversation: no suggestion
    chat.wait_printed("I am the demo's scripted model")
    assert len(chat.backend.session.history) == 2


def test_an_unreachable_server_is_one_line_and_the_prompt_stays_usable(
    open_chat: Callable[..., Chat], tmp_path: Path, refused_port: int
) -> None:
    model = OpenAICompatible(
        base_url=f"http://127.0.0.1:{refused_port}/v1",
        model="nothing-there",
        retry=RetryPolicy(max_retries=0),
    )
    chat = open_chat(model=model, workspace=tmp_path)
    chat.keys("hello" + ENTER)
    chat.wait_printed("✗ error: ", "the error line")
    chat.wait_idle()
    errors = [line for line in chat.app.printed if "✗ error: " in line]
    assert len(errors) == 1 and "cannot connect" in errors[0]
    chat.keys("again" + ENTER)
    chat.wait(
        lambda: len([line for line in chat.app.printed if "✗ error: " in line]) == 2,
        "a second try, a second line",
    )
    assert chat.thread.is_alive()


def test_hostile_model_text_cannot_drive_the_terminal(
    open_chat: Callable[..., Chat], tmp_path: Path
) -> None:
    def hostile(request: LlmRequest) -> ScriptReply:
        if request.purpose != "main":
            return ScriptReply(text='{"suggestion": "x"}')
        return ScriptReply(text="clear\x1b[2J\x1b]0;owned\x07 done\r\nbell\x07 \ud800")

    chat = open_chat(model=FunctionModel(hostile), workspace=tmp_path)
    chat.keys("go" + ENTER)
    chat.wait_printed("done")
    text = chat.printed()
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    text.encode("utf-8")  # a lone surrogate would make the terminal's encoder raise
    assert "clear\\x1b[2J\\x1b]0;owned\\x07 done" in text


def test_the_demo_suggests_the_tour_then_notes_forever() -> None:
    from fore.messages.conversation import UserMessage
    from fore.supervision.chat.demo import next_suggestion

    history: list[Any] = []
    seen = []
    for _ in range(6):
        step = next_suggestion(history)
        seen.append(step)
        history.append(UserMessage(text=step))
    assert seen == [OPENING, ADD_TEST, FIX, RUN_TESTS, ADD_NOTE, ADD_NOTE]


class BlockingBackend:
    """A ChatBackend whose turns and Tabs never answer until released: the UI must not care."""

    model_label = "blocking"

    def __init__(self, workspace: Path) -> None:
        import queue

        self.workspace = workspace
        self.release = threading.Event()
        self.calls: list[str] = []
        self.queue: queue.Queue[Any] = queue.Queue()
        self.generation = 0
        self.mode = ApprovalMode.DEFAULT

    async def _released(self) -> None:
        while not self.release.is_set():
            await asyncio.sleep(0.01)

    async def asubmit(self, text: str, *, timeout: float) -> Any:
        from fore.messages.session import TurnResult

        self.calls.append(f"submit:{text}")
        await self._released()
        return TurnResult(run_id="r1", session_id="s", status="cancelled", error="cancelled")

    async def aaccept(self, *, timeout: float) -> Any:
        self.calls.append("accept")
        await self._released()
        raise RuntimeError("released")

    async def stream(self) -> Any:
        import queue

        while not self.release.is_set():
            try:
                yield self.queue.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.01)

    def dismiss(self) -> None:
        self.calls.append("dismiss")

    def cancel(self) -> None:
        self.calls.append("cancel")

    def set_mode(self, mode: ApprovalMode) -> None:
        self.calls.append(f"mode:{mode.value}")
        self.mode = mode

    def set_model(self, name: str) -> str:
        self.calls.append(f"model:{name}")
        self.release.wait(WAIT)
        raise RuntimeError("released")

    def reset(self) -> None:
        self.release.wait(WAIT)

    def close(self) -> None:
        self.release.set()


def test_a_hostile_suggestion_is_drawn_as_one_safe_line() -> None:
    from prompt_toolkit.document import Document
    from prompt_toolkit.layout.processors import TransformationInput

    from fore.supervision.chat.screen import MAX_GHOST, GhostText

    processor = GhostText(lambda: "fix it\x1b[2J\x1b]0;owned\x07\nrm -rf /" + "x" * 1000)
    ti = TransformationInput(
        buffer_control=None,  # type: ignore[arg-type]
        document=Document(""),
        lineno=0,
        source_to_display=lambda i: i,
        fragments=[],
        width=80,
        height=1,
    )
    ((style, text),) = processor.apply_transformation(ti).fragments
    assert style == "class:ghost" and len(text) <= MAX_GHOST
    assert text.startswith("fix it\\x1b[2J\\x1b]0;owned\\x07 rm -rf /")
    assert "\x1b" not in text and "\n" not in text


def test_the_ui_never_waits_on_the_runtime(tmp_path: Path) -> None:
    from fore.messages.speculation import (
        SpeculationStatus,
        SpeculationStatusChanged,
        Suggestion,
        SuggestionReady,
    )

    backend = BlockingBackend(tmp_path)
    with create_pipe_input() as pipe:
        chat = ChatApp(backend, input=pipe, output=DummyOutput())
        done = threading.Event()
        thread = threading.Thread(
            target=lambda: (asyncio.run(chat.run_async()), done.set()), daemon=True
        )
        thread.start()
        try:
            wait_for(lambda: chat.app.is_running, "the app")
            # a suggestion, and its speculation's status pushed (never polled) ...
            suggestion = Suggestion(id="g", text="do it", source="model", snapshot_version="v")
            backend.queue.put(SuggestionReady(session_id="s", suggestion=suggestion))
            wait_for(lambda: chat.ghost == "do it", "the ghost")
            status = SpeculationStatus(state="running", suggestion="do it", tool_calls=2)
            backend.queue.put(
                SpeculationStatusChanged(session_id="s", status=status, shown="do it")
            )
            wait_for(lambda: chat.spec_status == status, "the pushed status")
            # ... and a key still removes it at once, telling the runtime without waiting
            pipe.send_text("x")
            wait_for(lambda: chat.ghost is None and chat.buffer.text == "x", "the key")
            assert "dismiss" in backend.calls
            # a turn that never answers: the prompt still edits, Ctrl-C still cancels
            pipe.send_text("\r")
            wait_for(lambda: "submit:x" in backend.calls, "the blocked submit")
            pipe.send_text("more")
            wait_for(lambda: chat.buffer.text == "more", "typing during the turn")
            pipe.send_text("\x1b[Z")  # Shift-Tab: a tell, never a wait
            wait_for(lambda: "mode:auto-edit" in backend.calls, "the mode change")
            pipe.send_text("\x03")
            wait_for(lambda: "cancel" in backend.calls, "the cancel")
            backend.release.set()
            wait_for(lambda: chat.busy is None, "the turn's end")
        finally:
            backend.release.set()
            loop = chat._loop
            if loop is not None:
                loop.call_soon_threadsafe(chat._leave)
            thread.join(WAIT)
        assert done.is_set()
