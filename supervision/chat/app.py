"""The ``fore chat`` terminal: a scrolling prompt_toolkit application over a :class:`ChatBackend`.

Layout (not full screen: the transcript scrolls in the terminal's own
history, so it can be scrolled back, searched and copied like any output)::

    … final lines, printed once above the app (answers, finished tool calls) …
      ⠹ shell  python3 -m unittest -q  running 1.2 s      ← live: redrawn in place
      ? allow shell python3 -m unittest -q?  y / n / a    ← an approval, when asked
    › add a test for an empty title                       ← the prompt; the suggestion
                                                            is grey ghost text here
     demo │ auto-edit ⇧Tab │ ready: 2 calls, 1 file · Tab applies │ 1.2k tok │ Tab saved 3.1 s

Threads. The UI thread (prompt_toolkit's asyncio loop) never waits on the
runtime: turns and Tab are awaited (``Session.asubmit`` / ``aaccept``), the
session's events arrive through ``async for event in Session.stream()`` --
the speculation's state among them, as ``SpeculationStatusChanged`` events,
so nothing is polled -- and a key binding only ever *tells* the runtime
something (``dismiss``, ``cancel``, the approval mode: no wait). The two calls
that do wait (``/model``, ``/clear``) run on a small executor. The runtime
asks for approvals on its hook lane (``open_session(approver=...)``), where
:meth:`ChatApp.approver` waits -- within the request's deadline -- for the
person's answer, which the loop delivers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import ThreadedCompleter, merge_completers
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText, StyleAndTextTuples
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent, merge_key_bindings
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import (
    ConditionalContainer,
    Float,
    FloatContainer,
    HSplit,
    Layout,
    Window,
)
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.layout.processors import (
    BeforeInput,
    Processor,
    Transformation,
    TransformationInput,
)
from prompt_toolkit.output import Output
from prompt_toolkit.renderer import print_formatted_text as render_formatted_text
from prompt_toolkit.styles import Style

from fore.actors.worker.approval import ApprovalDecision, ApprovalRequest
from fore.messages.gate import ApprovalMode
from fore.messages.session import TurnFinished, TurnResult
from fore.messages.speculation import (
    AcceptResult,
    SpeculationFinished,
    SpeculationProgress,
    SpeculationSkipped,
    SpeculationStatus,
    SpeculationStatusChanged,
    SuggestionReady,
)
from fore.supervision.chat.approval import MODE_HELP, next_mode, short_arguments
from fore.supervision.chat.backend import ChatBackend
from fore.supervision.chat.commands import (
    CommandCompleter,
    UnknownCommand,
    help_lines,
    parse_command,
)
from fore.supervision.chat.paths import PathCompleter, at_word
from fore.supervision.chat.status import (
    FINAL_STATES,
    StatusInput,
    cache_lines,
    cost_lines,
    speculation_text,
    status_line,
)
from fore.supervision.chat.text import format_duration, one_line
from fore.supervision.chat.trace import Trace
from fore.supervision.chat.transcript import SPINNER, Line, Totals, Transcript, diff_summary

STYLE = Style.from_dict(
    {
        # The suggestion: grey (SGR 90), readable on dark and light backgrounds.
        "ghost": "fg:ansibrightblack",
        "prompt": "bold fg:ansicyan",
        "prompt.echo": "bold fg:ansicyan",
        "user": "bold",
        "answer": "",
        "dim": "fg:ansibrightblack",
        "note": "fg:ansibrightblack",
        "tool.name": "bold",
        "tool.args": "",
        "tool.running": "fg:ansiyellow",
        "tool.queued": "fg:ansibrightblack",
        "tool.done": "fg:ansigreen",
        "tool.failed": "fg:ansired",
        "tool.skipped": "fg:ansiyellow",
        "alert.info": "fg:ansibrightblack",
        "alert.warn": "fg:ansiyellow",
        "alert.error": "fg:ansired",
        "error": "fg:ansired",
        "diff.mark": "fg:ansiblue",
        "diff.path": "bold",
        "diff.stat": "fg:ansigreen",
        "accept": "fg:ansimagenta",
        "approval": "bold fg:ansiyellow",
        "approval.keys": "",
        "hint": "fg:ansibrightblack italic",
        "status": "bg:ansiblack fg:ansiwhite",
    }
)

TURN_TIMEOUT_S = 3600.0
"""How long the UI waits for one turn (a cancel or Ctrl-C ends it sooner)."""
ACCEPT_TIMEOUT_S = 900.0
TICK_S = 0.1
"""Redraw period while something on screen has a clock (spinners, durations)."""
APPROVAL_WAIT_S = 600.0
DEBOUNCE_RETRY_S = 0.15
"""Past the session's accept debounce (``SpeculationConfig.accept_debounce_ms``, 100 ms)."""
MAX_KEPT_LINES = 20_000
MAX_ECHO = 1_000
"""The longest echo of a prompt (a paste of a whole file is sent whole, echoed short)."""
MAX_GHOST = 300
"""The longest suggestion drawn (one line, sanitized)."""
RUN_END_GRACE_S = 1.0
"""How long a finished run's answer waits for its TurnFinished event before closing it."""
SUBSCRIBE_WAIT_S = 5.0
"""How long ``/clear`` waits for the event stream of the new conversation to start."""


@dataclass
class _Approval:
    request: ApprovalRequest
    answer: concurrent.futures.Future[ApprovalDecision]


class GhostText(Processor):
    """Draws the suggestion after the cursor of the empty prompt, in the ghost style."""

    def __init__(self, ghost: Callable[[], str | None]) -> None:
        self._ghost = ghost

    def apply_transformation(self, transformation_input: TransformationInput) -> Transformation:
        ti = transformation_input
        ghost = self._ghost()
        if ghost and ti.lineno == 0 and not ti.document.text:
            # The session filters suggestions, but the screen does not rely on it.
            return Transformation([*ti.fragments, ("class:ghost", one_line(ghost, MAX_GHOST))])
        return Transformation(ti.fragments)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _line(style: str, text: str) -> Line:
    return ((style, text),)


def _fragments(lines: Sequence[Line]) -> StyleAndTextTuples:
    out: StyleAndTextTuples = []
    for index, line in enumerate(lines):
        if index:
            out.append(("", "\n"))
        out.extend(line)
    return out


class ChatApp:
    """The terminal UI (see the module docs); :meth:`run` blocks until the person leaves."""

    def __init__(
        self,
        backend: ChatBackend,
        *,
        banner: Sequence[str] = (),
        opening: str | None = None,
        trace: Trace | None = None,
        input: Input | None = None,
        output: Output | None = None,
        approval_wait_s: float = APPROVAL_WAIT_S,
    ) -> None:
        self.backend = backend
        self.banner = list(banner)
        self.opening = opening
        self.trace = trace or Trace(None)
        self.approval_wait_s = approval_wait_s
        self.transcript = Transcript()
        self.totals = Totals()
        self.printed: deque[str] = deque(maxlen=MAX_KEPT_LINES)
        """The lines printed above the app, as plain text (the newest; tests read them)."""
        self.ghost: str | None = None
        self.spec_status: SpeculationStatus | None = None
        self._latest_status: SpeculationStatus | None = None
        """The newest status event, whichever suggestion it is about (it may come first)."""
        self.busy: str | None = None
        """``"turn"``, ``"accept"`` or ``"clear"`` while a blocking call runs, else ``None``."""
        self.busy_since = 0.0
        self.hint = ""
        self.approvals: deque[_Approval] = deque()
        self._pending_ghost: str | None = None
        self.queued: str | None = None
        """A prompt sent while a turn ran: it goes when the turn ends."""
        self._ended_runs: set[str] = set()
        self._ended_order: deque[str] = deque()
        self._suggestion_possible = False
        """A turn ended and no key was typed since: a suggestion may still be coming."""
        self._exit_armed = False
        self._awaiting_ghost_removal: int | None = None
        self._awaiting_echo: int | None = None
        self._key_seq = 0
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="fore-chat"
        )
        self._pump: asyncio.Task[None] | None = None
        self._streaming = -1
        """The conversation (backend generation) whose events the pump reads."""
        self._ticker: asyncio.Task[None] | None = None
        self.exit_code = 0
        self.buffer = Buffer(
            completer=ThreadedCompleter(
                merge_completers([CommandCompleter(), PathCompleter(backend.workspace)])
            ),
            complete_while_typing=Condition(self._completing_word),
            history=InMemoryHistory(),
            multiline=False,
        )
        self.buffer.on_text_changed += self._text_changed
        self.buffer.on_completions_changed += self._completions_changed
        self._tab_pending = False
        self.app: Application[int] = Application(
            layout=self._layout(),
            key_bindings=merge_key_bindings([load_key_bindings(), self._bindings()]),
            style=STYLE,
            full_screen=False,
            erase_when_done=True,
            mouse_support=False,
            input=input,
            output=output,
            after_render=self._after_render,
        )
        # A lone Esc is told from an Alt-key sequence after this long (default 0.5 s).
        self.app.ttimeoutlen = 0.05

    # -- layout ----------------------------------------------------------------------------

    def _layout(self) -> Layout:
        live = ConditionalContainer(
            Window(
                FormattedTextControl(self._live_fragments),
                wrap_lines=True,
                dont_extend_height=True,
            ),
            filter=Condition(lambda: self.busy is not None or bool(self.transcript.blocks)),
        )
        approval = ConditionalContainer(
            Window(
                FormattedTextControl(self._approval_fragments),
                wrap_lines=True,
                dont_extend_height=True,
            ),
            filter=Condition(lambda: bool(self.approvals)),
        )
        hint = ConditionalContainer(
            Window(FormattedTextControl(lambda: [("class:hint", f"  {self.hint}")]), height=1),
            filter=Condition(lambda: bool(self.hint)),
        )
        prompt = Window(
            BufferControl(
                self.buffer,
                input_processors=[
                    BeforeInput(self._prompt_fragments),
                    GhostText(self._visible_ghost),
                ],
            ),
            height=self._input_height,
            wrap_lines=True,
            dont_extend_height=True,
        )
        status = Window(FormattedTextControl(self._status_fragments), height=1)
        body = HSplit([live, approval, hint, prompt, status])
        menu = Float(
            xcursor=True,
            ycursor=True,
            transparent=True,
            content=CompletionsMenu(max_height=8, scroll_offset=1),
        )
        return Layout(FloatContainer(body, floats=[menu]), focused_element=prompt)

    def _input_height(self) -> Dimension:
        # Room below the prompt for the completion menu while it is open.
        if self.buffer.complete_state is not None and not self.app.is_done:
            return Dimension(min=9)
        return Dimension(min=1)

    def _prompt_fragments(self) -> StyleAndTextTuples:
        if self.approvals:
            return [("class:approval", "? ")]
        return [("class:prompt", "› ")]

    def _visible_ghost(self) -> str | None:
        return None if self.approvals else self.ghost

    def _live_fragments(self) -> StyleAndTextTuples:
        lines = self.transcript.live()
        if self.busy is not None and not self.transcript.running:
            elapsed = time.monotonic() - self.busy_since
            spin = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
            what = {
                "turn": "working",
                "accept": "applying the suggestion",
                "clear": "starting a new conversation",
            }.get(self.busy, self.busy)
            lines.append(
                (
                    ("class:tool.running", f"  {spin} "),
                    ("class:dim", f"{what} {format_duration(elapsed)}"),
                )
            )
        return _fragments(lines)

    def _approval_fragments(self) -> StyleAndTextTuples:
        if not self.approvals:
            return []
        request = self.approvals[0].request
        more = f"  (+{len(self.approvals) - 1} waiting)" if len(self.approvals) > 1 else ""
        summary = short_arguments(request.tool, request.arguments)
        return [
            ("class:approval", f"  ? allow {one_line(request.tool, 40)}"),
            ("", f"  {summary}" if summary else ""),
            (
                "class:dim",
                f"   ({request.mode.value} mode asks: {one_line(request.reason, 70)}){more}\n",
            ),
            (
                "class:approval.keys",
                f"    y yes · n no · a always allow {one_line(request.tool, 40)} · Esc no",
            ),
        ]

    def _status_fragments(self) -> StyleAndTextTuples:
        width = self.app.output.get_size().columns
        busy = None
        if self.busy == "turn":
            busy = "turn running · Ctrl-C cancels"
        elif self.busy == "clear":
            busy = "starting a new conversation…"
        spec = speculation_text(
            self.spec_status, shown=self.ghost is not None, accepting=self.busy == "accept"
        )
        line = status_line(
            StatusInput(
                model=self.backend.model_label,
                mode=self.backend.mode,
                speculation=spec,
                totals=self.totals,
                busy=busy,
            ),
            width,
        )
        return list(line)

    def _completing_word(self) -> bool:
        before = self.buffer.document.text_before_cursor
        return at_word(before) is not None or (before.startswith("/") and " " not in before)

    # -- key bindings -------------------------------------------------------------------------

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()

        @kb.add(Keys.Any)
        def _typed(event: KeyPressEvent) -> None:
            self._on_char(event.data, event)

        @kb.add("enter")
        def _enter(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                return
            buf = self.buffer
            state = buf.complete_state
            if state is not None:
                buf.complete_state = None
                if state.current_completion is not None:
                    return  # Enter took the completion; the next Enter sends
            self._send_buffer()

        @kb.add("tab")
        def _tab(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                return
            buf = self.buffer
            if self.ghost is not None and not buf.text:
                self._accept_suggestion()
            elif buf.complete_state is not None and buf.complete_state.completions:
                buf.complete_next()
            elif self._completing_word():
                # The listing may still run (completion while typing): take its
                # first answer when it comes; if none runs, start one.
                self._tab_pending = True
                buf.start_completion(select_first=True)

        @kb.add("s-tab")
        def _cycle(event: KeyPressEvent) -> None:
            self._set_mode(next_mode(self.backend.mode))

        @kb.add("escape", eager=True)
        def _escape(event: KeyPressEvent) -> None:
            self._keypress()
            if self.approvals:
                self._answer(ApprovalDecision.DENY)
            elif self.buffer.complete_state is not None:
                self.buffer.cancel_completion()
            elif self.ghost is not None:
                self._dismiss("esc")

        @kb.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            self._interrupt()

        @kb.add("c-d")
        def _eof(event: KeyPressEvent) -> None:
            if self.buffer.text:
                self.buffer.delete()
                return
            self._leave()

        return kb

    def _keypress(self) -> None:
        """Any key but Ctrl-C disarms the second Ctrl-C and clears a hint."""
        self._exit_armed = False
        if self.hint:
            self.hint = ""

    def _on_char(self, data: str, event: KeyPressEvent) -> None:
        self._keypress()
        if not data.isprintable():
            return  # an unbound control key: nothing to type
        if self.approvals:
            decision = {
                "y": ApprovalDecision.ALLOW,
                "n": ApprovalDecision.DENY,
                "a": ApprovalDecision.ALWAYS,
            }.get(data.lower())
            if decision is not None:
                self._answer(decision)
            return
        self._key_seq += 1
        at_ns = time.monotonic_ns()
        if self.ghost is not None:
            self.trace.mark("key", at_ns, key="char", ghost=True, seq=self._key_seq)
            self._dismiss("typed")
        else:
            self.trace.mark("key", at_ns, key="char", ghost=False, seq=self._key_seq)
            self._awaiting_echo = self._key_seq
            if self._suggestion_possible:
                self._suggestion_possible = False
                self.backend.dismiss()  # a suggestion still on its way is not wanted now
        event.current_buffer.insert_text(data)

    def _completions_changed(self, buffer: Buffer) -> None:
        state = buffer.complete_state
        if self._tab_pending and state is not None and state.completions:
            self._tab_pending = False
            if state.complete_index is None:
                buffer.go_to_completion(0)

    def _text_changed(self, _buffer: Buffer) -> None:
        # Paste, history (↑/↓), a completion: anything that fills the prompt is
        # not Tab, so it throws the suggestion away too.
        if self.buffer.complete_state is None:
            self._tab_pending = False
        if self.buffer.text and self.ghost is not None:
            self._dismiss("edited")

    # -- suggestions ---------------------------------------------------------------------------

    def _dismiss(self, why: str) -> None:
        """Typing, Esc: the ghost goes now; the speculation is aborted (a tell)."""
        if self.ghost is None:
            return
        self.backend.dismiss()
        self.ghost = None
        self.spec_status = None
        self._suggestion_possible = False
        self._awaiting_ghost_removal = self._key_seq
        self.trace.mark("dismissed", why=why, seq=self._key_seq)
        self.app.invalidate()

    def _show_ghost(self, text: str) -> None:
        if self.busy is not None or self.approvals:
            self._pending_ghost = text
            return
        if self.buffer.text:  # the person is already typing something else
            self.backend.dismiss()
            return
        if self.backend.mode is ApprovalMode.PLAN:
            return  # plan mode makes no changes: nothing to predict (the runtime agrees)
        self.ghost = text
        self.spec_status = None
        self._suggestion_possible = False
        self.trace.mark("ghost_shown", text=text)
        latest = self._latest_status
        if latest is not None and latest.suggestion == text:
            self._status_changed(latest)  # its speculation's news came first
        self.app.invalidate()

    def _on_status(self, event: SpeculationStatusChanged) -> None:
        """The speculation's news (pushed, never polled): shown while its ghost is."""
        self._latest_status = event.status
        if event.shown is None and self._pending_ghost is not None:
            self._pending_ghost = None  # withdrawn before it could be shown
        if self.ghost is None:
            return
        if event.shown is None and event.status.state in ("aborted", "stale", "idle"):
            # The runtime withdrew it (plan mode, a new model, another front end's
            # submit): the ghost goes too.
            self.ghost = None
            self.spec_status = None
            self.app.invalidate()
            return
        if event.status.suggestion == self.ghost:
            self._status_changed(event.status)

    def _status_changed(self, status: SpeculationStatus) -> None:
        if status == self.spec_status:
            return
        self.spec_status = status
        if status.state in FINAL_STATES:
            self.trace.mark("spec_final", state=status.state)
        self.app.invalidate()

    def _accept_suggestion(self) -> None:
        suggestion = self.ghost
        if suggestion is None or self.busy is not None:
            return
        self._key_seq += 1
        self.trace.mark("key", key="tab", seq=self._key_seq)
        status = self.spec_status
        self.ghost = None
        self.spec_status = None
        self._begin("accept")
        self._echo(suggestion, "Tab")
        self.app.create_background_task(self._accept(suggestion, status))

    async def _accept(self, suggestion: str, status: SpeculationStatus | None) -> None:
        try:
            result: AcceptResult = await self.backend.aaccept(timeout=ACCEPT_TIMEOUT_S)
            if result.outcome == "debounced":
                # The runtime ignores a Tab this soon after the previous accept began
                # (a double press). This one was pressed on a suggestion shown after
                # that accept ended -- the UI takes no Tab while one runs -- so it is
                # deliberate: once the debounce window has passed, it is sent again.
                await asyncio.sleep(DEBOUNCE_RETRY_S)
                result = await self.backend.aaccept(timeout=ACCEPT_TIMEOUT_S)
        except Exception as exc:
            why = one_line(str(exc) or type(exc).__name__, 160)
            self._print_lines([_line("class:error", f"  ✗ the accept failed: {why}")])
            self._end()
            return
        self.trace.mark("accept_result", outcome=result.outcome, files=list(result.files_applied))
        if result.turn is not None:
            await self._run_ended(result.turn)
        lines = self._accept_lines(result)
        self._flush_transcript(extra=lines, mark="transcript_shown")
        self._end()

    def _accept_lines(self, result: AcceptResult) -> list[Line]:
        outcome = result.outcome
        if outcome == "debounced":
            return [_line("class:dim", "  (Tab ignored: pressed twice)")]
        if outcome == "no_suggestion":
            return [(("class:dim", "  (that suggestion is no longer on offer)"),)]
        if outcome in ("accepted", "boundary"):
            self.totals.time_saved_s += result.time_saved_s
            if outcome == "accepted" or result.turn is None:
                self.transcript.items(result.items[1:], speculated=True)
            lines = diff_summary(result.items, result.files_applied)
            calls = sum(len(getattr(item, "tool_calls", ())) for item in result.items)
            files = len(result.files_applied)
            saved = format_duration(result.time_saved_s)
            summary = (
                f"  ⚡ done ahead of time: {_plural(calls, 'tool call')}, {_plural(files, 'file')}"
                f" · saved {saved} · applied in {format_duration(result.accept_latency_s)}"
            )
            if outcome == "boundary":
                tool = result.boundary_tool or "a call"
                why = one_line(result.boundary_reason or "", 80)
                if not calls and not files:
                    summary = f"  ⚡ nothing ran ahead of time: the speculation stopped at {tool}"
                else:
                    summary += f"; it stopped at {tool}"
                summary += f" ({why}), which ran now"
            return [*lines, (("class:accept", summary),)]
        if outcome == "conflict":
            names = one_line(", ".join(result.conflicts), 200) or "files"
            text = f"  ⚠ {names} changed since the speculation ran: it ran again on them"
            return [_line("class:alert.warn", text)]
        if outcome == "stale":
            return [_line("class:dim", "  (the speculation was stale: it ran as a normal turn)")]
        if outcome == "failed":
            return [_line("class:error", "  ✗ applying the speculation failed: it ran as a turn")]
        if outcome == "aborted":
            return [(("class:dim", "  (the speculation was called off)"),)]
        return []

    # -- turns -------------------------------------------------------------------------------

    def _send_buffer(self) -> None:
        text = self.buffer.text.strip()
        if not text:
            return
        try:
            command = parse_command(text)
        except UnknownCommand as exc:
            self._set_hint(str(exc))
            return
        if command is not None:
            self.buffer.reset(append_to_history=True)
            self._command(command.name, command.argument)
            return
        if self.busy is not None:
            if self.queued is not None:
                self._set_hint("a prompt is already queued: Ctrl-C cancels the turn")
                return
            # Typed while a turn runs: it goes when the turn ends (Ctrl-C takes it back).
            self.buffer.reset(append_to_history=True)
            self.queued = text
            self._set_hint(f"queued: {one_line(text, 60)}")
            return
        self.buffer.reset(append_to_history=True)
        self._send(text)

    def _send(self, text: str, note: str = "") -> None:
        if self.ghost is not None:
            self._dismiss("submitted")
        self._suggestion_possible = False
        self._begin("turn")
        self._echo(text, note)
        self.app.create_background_task(self._turn(text))

    async def _turn(self, text: str) -> None:
        error: str | None = None
        result: TurnResult | None = None
        try:
            result = await self.backend.asubmit(text, timeout=TURN_TIMEOUT_S)
        except Exception as exc:
            error = one_line(str(exc) or type(exc).__name__, 160)
        if result is not None:
            await self._run_ended(result)
        if error is not None:
            self.transcript.note((("class:error", f"  ✗ error: {error}"),))
        self._flush_transcript(mark="turn_done")
        self._end()

    async def _run_ended(self, result: TurnResult) -> None:
        """Finish a run's lines: after its own TurnFinished event, or from its result.

        The event comes after every other event of the run, so waiting for it
        (briefly: the answer and the events travel separately) keeps a late
        delta from landing after the run's last line.
        """
        deadline = time.monotonic() + RUN_END_GRACE_S
        while result.run_id not in self._ended_runs and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._finish_run(result)

    def _finish_run(self, result: TurnResult) -> None:
        """Count and close a run once, whichever of its event and its answer comes first."""
        if result.run_id in self._ended_runs:
            return
        self._ended_runs.add(result.run_id)
        self._ended_order.append(result.run_id)
        if len(self._ended_order) > 1000:
            self._ended_runs.discard(self._ended_order.popleft())
        self.totals.turns += 1
        self.totals.main_tokens += result.usage.total_tokens
        self.transcript.turn_finished(result)

    def _begin(self, what: str) -> None:
        self.busy = what
        self.busy_since = time.monotonic()
        self.hint = ""
        self._ensure_ticker()
        self.app.invalidate()

    def _end(self) -> None:
        self.busy = None
        self.hint = "Ctrl-C again (or Ctrl-D) leaves" if self._exit_armed else ""
        self._suggestion_possible = True
        pending, self._pending_ghost = self._pending_ghost, None
        queued, self.queued = self.queued, None
        if queued is not None:
            # The person already typed what comes next: no suggestion is wanted.
            self._send(queued, "queued")
            return
        if pending is not None:
            self._show_ghost(pending)
        self.app.invalidate()

    def _interrupt(self) -> None:
        if self._exit_armed:
            self._leave()
            return
        self._exit_armed = True
        if self.approvals:
            while self.approvals:
                self._answer(ApprovalDecision.DENY)
        if self.busy in ("turn", "accept"):
            self.backend.cancel()
            queued, self.queued = self.queued, None
            if queued is not None and not self.buffer.text:
                self.buffer.text = queued  # taken back: it is in the prompt line again
                self.buffer.cursor_position = len(queued)
            self._set_hint("cancelling… (Ctrl-C again leaves)")
        elif self.buffer.text:
            self.buffer.reset()
            self._set_hint("cleared (Ctrl-C again leaves)")
        else:
            self._set_hint("Ctrl-C again (or Ctrl-D) leaves")

    def _set_hint(self, text: str) -> None:
        self.hint = text
        self.app.invalidate()

    def _set_mode(self, mode: ApprovalMode) -> None:
        """Shift-Tab, ``/approval``: the runtime re-speculates or withdraws as the mode says."""
        self.backend.set_mode(mode)
        if mode is ApprovalMode.PLAN:
            # No suggestions in plan mode: the runtime withdraws it; so does the screen.
            self._pending_ghost = None
            if self.ghost is not None:
                self.ghost = None
                self.spec_status = None
        self._set_hint(f"approval mode {mode.value}: {MODE_HELP[mode]}")

    # -- approvals (the hook lane calls approver; the answer comes from a key) --------------

    def approver(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask the person (the runtime calls it on its hook lane; waits within the deadline)."""
        loop = self._loop
        if loop is None or self._stop.is_set():
            return ApprovalDecision.DENY
        answer: concurrent.futures.Future[ApprovalDecision] = concurrent.futures.Future()
        pending = _Approval(request, answer)
        try:
            loop.call_soon_threadsafe(self._ask, pending)
        except RuntimeError:  # the loop is gone: the app has ended
            return ApprovalDecision.DENY
        try:
            return answer.result(timeout=min(self.approval_wait_s, request.timeout_s))
        except concurrent.futures.TimeoutError:
            try:
                loop.call_soon_threadsafe(self._withdraw, pending, "no answer in time")
            except RuntimeError:
                pass
            return ApprovalDecision.DENY
        except concurrent.futures.CancelledError:
            return ApprovalDecision.DENY

    def _ask(self, pending: _Approval) -> None:
        if self._stop.is_set():
            pending.answer.set_result(ApprovalDecision.DENY)
            return
        if self.ghost is not None:
            self._pending_ghost = self.ghost
            self.ghost = None
        self.approvals.append(pending)
        self.trace.mark("approval_asked", tool=pending.request.tool)
        self.app.invalidate()

    def _withdraw(self, pending: _Approval, why: str) -> None:
        if pending in self.approvals:
            self.approvals.remove(pending)
            self.transcript.note((("class:dim", f"  ⊘ {pending.request.tool}: {why}"),))
            self._flush_transcript()

    def _answer(self, decision: ApprovalDecision) -> None:
        if not self.approvals:
            return
        pending = self.approvals.popleft()
        if not pending.answer.done():
            pending.answer.set_result(decision)
        word = {
            ApprovalDecision.ALLOW: "yes",
            ApprovalDecision.DENY: "no",
            ApprovalDecision.ALWAYS: "always",
        }[decision]
        request = pending.request
        self.transcript.note(
            (
                ("class:approval", f"  ? {one_line(request.tool, 40)}"),
                ("", f"  {short_arguments(request.tool, request.arguments)}"),
                ("class:dim", f"  → {word}"),
            )
        )
        self._flush_transcript()

    # -- commands --------------------------------------------------------------------------

    def _command(self, name: str, argument: str) -> None:
        if name == "help":
            self._print_text(help_lines())
        elif name == "exit":
            self._leave()
        elif name == "cost":
            usage = getattr(self.backend, "usage", None)  # issue 28: by purpose, with cost
            model = getattr(getattr(self.backend, "config", None), "model", None)
            meter = getattr(model, "meter", None)  # prompt-cache figures (issue 27)
            self._print_text(
                cost_lines(self.totals, self.backend.model_label, usage() if usage else None)
                + cache_lines(meter)
            )
        elif name == "model":
            if not argument:
                self._print_text([f"model: {self.backend.model_label}"])
            elif self.busy is not None:
                self._set_hint("a turn is running: switch models when it ends")
            else:
                self.app.create_background_task(self._switch_model(argument))
        elif name == "approval":
            if not argument:
                mode = self.backend.mode
                self._print_text([f"approval mode {mode.value}: {MODE_HELP[mode]}"])
                return
            try:
                mode = ApprovalMode(argument)
            except ValueError:
                allowed = ", ".join(m.value for m in ApprovalMode)
                self._set_hint(f"unknown approval mode {argument!r}; one of {allowed}")
                return
            self._set_mode(mode)
        elif name == "clear":
            if self.busy is not None:
                self._set_hint("a turn is running: Ctrl-C cancels it first")
                return
            if self.ghost is not None:
                self._dismiss("clear")
            self._begin("clear")
            self.app.create_background_task(self._clear())

    async def _switch_model(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        old = self.backend.model_label
        try:
            label = await loop.run_in_executor(self._executor, self.backend.set_model, name)
        except Exception as exc:
            why = one_line(str(exc) or type(exc).__name__, 160)
            self._print_lines([_line("class:error", f"  ✗ /model {one_line(name, 60)}: {why}")])
            return
        if self.ghost is not None:  # the old model's suggestion is withdrawn
            self.ghost = None
            self.spec_status = None
        self._print_text([f"model: {one_line(label, 60)} (was {one_line(old, 60)})"])

    async def _clear(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self.backend.reset)
        except Exception as exc:
            why = one_line(str(exc), 120)
            self._print_lines(
                [_line("class:error", f"  ✗ could not start a new conversation: {why}")]
            )
            self._end()
            return
        await self._streaming_generation(self.backend.generation)
        self.transcript = Transcript()

        def wipe() -> None:
            output = self.app.output
            output.erase_screen()
            output.cursor_goto(0, 0)
            output.flush()

        await run_in_terminal(wipe)
        self._print_text(["(a new conversation)"])
        self._end()
        self._suggestion_possible = False

    # -- events from the session ---------------------------------------------------------------

    async def _pump_events(self) -> None:
        """The session's events, in order, on the UI loop: one stream per conversation.

        ``/clear`` closes the old session, which ends its stream; the next
        one reads the new session's. No thread, no polling.
        """
        while not self._stop.is_set():
            generation = self.backend.generation
            try:
                stream = self.backend.stream()
            except Exception:
                await asyncio.sleep(0.05)  # between sessions (a /clear is under way)
                continue
            self._streaming = generation  # subscribed: ``stream()`` told the actors
            try:
                async for event in stream:
                    self._on_event(generation, event)
            except Exception:
                pass
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
            if generation == self.backend.generation:
                await asyncio.sleep(0.05)  # not replaced yet: it is closing (or /clear waits)

    async def _streaming_generation(self, generation: int) -> None:
        """Wait (bounded) until the pump reads ``generation``'s events."""
        deadline = time.monotonic() + SUBSCRIBE_WAIT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            if self._streaming >= generation:
                return
            await asyncio.sleep(0.01)

    def _on_event(self, generation: int, event: Any) -> None:
        if generation != self.backend.generation:
            return  # from a conversation /clear closed
        if isinstance(event, SuggestionReady):
            self._show_ghost(event.suggestion.text)
            return
        if isinstance(event, SpeculationStatusChanged):
            self._on_status(event)
            return
        if isinstance(event, SpeculationProgress | SpeculationSkipped):
            return  # the status events say what they change
        if isinstance(event, SpeculationFinished):
            self._speculation_finished(event)
            return
        if isinstance(event, TurnFinished):
            self._finish_run(event.result)
        else:
            self.transcript.event(event)
        self._flush_transcript()

    def _speculation_finished(self, event: SpeculationFinished) -> None:
        self.totals.speculation_tokens += event.tokens
        if event.outcome in ("accepted", "boundary"):
            self.totals.accepted += 1
        else:
            self.totals.wasted_tokens += event.tokens
            if event.outcome == "aborted":
                self.totals.aborted += 1
                self.trace.mark(
                    "spec_aborted",
                    cancel_latency_s=event.cancel_latency_s,
                    cleanup_latency_s=event.cleanup_latency_s,
                    was_running=event.was_running,
                )
        self.app.invalidate()

    # -- printing ------------------------------------------------------------------------------

    def _echo(self, text: str, note: str = "") -> None:
        line: Line = (("class:prompt.echo", "› "), ("class:user", one_line(text, MAX_ECHO)))
        if note:
            line = (*line, ("class:dim", f"  ({note})"))
        self.transcript.note(line)
        self._flush_transcript()

    def _print_text(self, lines: Sequence[str]) -> None:
        self._print_lines([(("class:note", line),) for line in lines])

    def _flush_transcript(self, extra: Sequence[Line] = (), mark: str | None = None) -> None:
        lines = self.transcript.commit()
        self._print_lines([*lines, *extra], mark=mark)
        self.app.invalidate()

    def _print_lines(self, lines: Sequence[Line], mark: str | None = None) -> None:
        if not lines:
            if mark is not None:
                self.trace.mark(mark)
            return
        self.printed.extend("".join(text for _style, text in line) for line in lines)
        fragments = FormattedText([*_fragments(lines), ("", "\n")])

        def render() -> None:
            output = self.app.output
            render_formatted_text(output, fragments, STYLE, color_depth=self.app.color_depth)
            output.flush()

        if not self.app.is_running:
            render()
            if mark is not None:
                self.trace.mark(mark)
            return
        done = run_in_terminal(render)
        if mark is not None:
            trace = self.trace

            def printed(_future: Any) -> None:
                trace.mark(mark)

            asyncio.ensure_future(done).add_done_callback(printed)

    # -- clocks and rendering hooks -----------------------------------------------------------

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = self.app.create_background_task(self._tick())

    async def _tick(self) -> None:
        while not self._stop.is_set():
            if self.busy is None and not self.transcript.running:
                return
            self.app.invalidate()
            await asyncio.sleep(TICK_S)

    def _after_render(self, _app: Application[int]) -> None:
        seq = self._awaiting_ghost_removal
        if seq is not None and self.ghost is None:
            self._awaiting_ghost_removal = None
            self.trace.mark("ghost_removed", seq=seq)
        echo = self._awaiting_echo
        if echo is not None:
            self._awaiting_echo = None
            self.trace.mark("echo_rendered", seq=echo)

    # -- running -------------------------------------------------------------------------------

    def _started(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pump = self.app.create_background_task(self._pump_events())
        if self.opening:
            self._send(self.opening, "sent by the demo")

    def _leave(self) -> None:
        if not self.app.is_done:
            self.app.exit(result=self.exit_code)

    def run(self) -> int:
        """Run until the person leaves; returns the exit code."""
        for line in self.banner:
            self._print_text([line])
        try:
            code = self.app.run(pre_run=self._started)
        finally:
            self.shutdown()
        return code

    async def run_async(self) -> int:
        for line in self.banner:
            self._print_text([line])
        try:
            return await self.app.run_async(pre_run=self._started)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Deny what waits on the person, cancel what runs, stop the event thread."""
        self._stop.set()
        while self.approvals:
            pending = self.approvals.popleft()
            if not pending.answer.done():
                pending.answer.set_result(ApprovalDecision.DENY)
        if self.busy in ("turn", "accept"):
            self.backend.cancel()
        if self.ghost is not None:
            self.backend.dismiss()
        if self._pump is not None:
            self._pump.cancel()  # prompt_toolkit cancels its background tasks too
        self._executor.shutdown(wait=False, cancel_futures=True)
