"""How ``fore chat`` drives its session: turns, suggestions and Tab, approvals, events.

Nothing here waits on the runtime on the UI loop: a turn and a Tab are
awaited (``asubmit`` / ``aaccept``), the session's events arrive through one
stream per conversation (:meth:`ChatDriver._pump_events`), and an approval
the runtime asks for on its hook lane is handed to the loop and answered by
a key (:meth:`ChatDriver.approver`). The keys and the slash commands that
call into this are :mod:`~supervision.chat.app`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

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
from fore.supervision.chat.app_state import PendingApproval
from fore.supervision.chat.approval import MODE_HELP, short_arguments
from fore.supervision.chat.screen import ChatScreen, styled_line
from fore.supervision.chat.status import FINAL_STATES
from fore.supervision.chat.text import format_duration, one_line, plural
from fore.supervision.chat.transcript import Line, diff_summary

TURN_TIMEOUT_S = 3600.0
"""How long the UI waits for one turn (a cancel or Ctrl-C ends it sooner)."""
ACCEPT_TIMEOUT_S = 900.0
DEBOUNCE_RETRY_S = 0.15
"""Past the session's accept debounce (``SpeculationConfig.accept_debounce_ms``, 100 ms)."""
RUN_END_GRACE_S = 1.0
"""How long a finished run's answer waits for its TurnFinished event before closing it."""
SUBSCRIBE_WAIT_S = 5.0
"""How long ``/clear`` waits for the event stream of the new conversation to start."""


class ChatDriver(ChatScreen):
    """The session's side of the app (see the module docs)."""

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
            self._print_lines([styled_line("class:error", f"  ✗ the accept failed: {why}")])
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
            return [styled_line("class:dim", "  (Tab ignored: pressed twice)")]
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
                f"  ⚡ done ahead of time: {plural(calls, 'tool call')}, {plural(files, 'file')}"
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
            return [styled_line("class:alert.warn", text)]
        if outcome == "stale":
            return [
                styled_line("class:dim", "  (the speculation was stale: it ran as a normal turn)")
            ]
        if outcome == "failed":
            return [
                styled_line("class:error", "  ✗ applying the speculation failed: it ran as a turn")
            ]
        if outcome == "aborted":
            return [(("class:dim", "  (the speculation was called off)"),)]
        return []

    # -- turns -------------------------------------------------------------------------------

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
        pending = PendingApproval(request, answer)
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

    def _ask(self, pending: PendingApproval) -> None:
        if self._stop.is_set():
            pending.answer.set_result(ApprovalDecision.DENY)
            return
        if self.ghost is not None:
            self._pending_ghost = self.ghost
            self.ghost = None
        self.approvals.append(pending)
        self.trace.mark("approval_asked", tool=pending.request.tool)
        self.app.invalidate()

    def _withdraw(self, pending: PendingApproval, why: str) -> None:
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
