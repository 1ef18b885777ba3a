"""The session API: a thin facade over one session's actors.

``Session`` is for scripts, tests and UIs that live outside the actor world;
the typed messages it sends (``Submit``, ``Resume``, ``CancelRun`` ...) are the
real interface. Every blocking call has a timeout. asyncio applications use
the ``a``-prefixed counterparts and :meth:`Session.stream`, which never block
the event loop (:mod:`supervision.session_async`).

One concept, kept whole although it is over 600 lines: it *is* the session's
public API, and each method is a short translation of a call into the typed
message it sends and the answer it waits for (with its deadline). What is not
that translation lives beside it: the event queue (:mod:`supervision.session_events`),
the order of the user's inputs (:mod:`supervision.input_order`), the asyncio
waits (:mod:`supervision.session_async`), the wiring of a session's actors
(:mod:`supervision.session_wiring`).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pykka

from fore.actors.core.cancel import CancelScope
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.future import PooledFuture
from fore.actors.gate.tool_gate import parse_approval_mode
from fore.actors.output.contract import (
    DEFAULT_MAX_OUTPUT_RETRIES,
    OutputValidationError,
    output_request,
)
from fore.actors.speculation.accept import GAVE_UP
from fore.actors.telemetry.context import current_context
from fore.actors.tools.base import Tool
from fore.actors.tools.decorator import as_tool
from fore.actors.worker.approval import ApprovalPolicy, LiveApproval
from fore.actors.worker.hooks import Hooks
from fore.messages.alerts import Alert, GetAlerts, SubscribeAlerts, UnsubscribeAlerts
from fore.messages.conversation import Item, Segment
from fore.messages.gate import ApprovalMode
from fore.messages.session import (
    AddTool,
    CancelRun,
    EventBase,
    GetHistory,
    GetRunState,
    OutputRequest,
    PauseRun,
    Resume,
    RunState,
    SetModel,
    Subscribe,
    TurnResult,
    Unsubscribe,
)
from fore.messages.speculation import (
    AbortSpeculation,
    AcceptResult,
    AcceptSuggestion,
    GetSpeculation,
    Keystroke,
    SetApprovalMode,
    SpeculationStatus,
    SubmitPrompt,
)
from fore.messages.usage import UsageLimits, UsageSummary
from fore.supervision.input_order import InputOrder, OnTheWay
from fore.supervision.session_async import DEFAULT_STREAM_MAXLEN, EventStream, wait_answer
from fore.supervision.session_events import AlertEvents, EventQueue

if TYPE_CHECKING:
    from fore.actors.worker.worker import Worker
    from fore.supervision.handle import Handle
    from fore.supervision.runtime import Runtime

T = TypeVar("T")


class Session:
    """One agent session: submit prompts, read history, alerts and events."""

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        *,
        worker: Handle[Worker],
        hooks: Hooks,
        state: Any,
        alert_sink: Any = None,
        pending_actions: Any = None,
        front: Any,
        workspace: Path | None = None,
    ) -> None:
        self.runtime = runtime
        self.workspace = workspace
        """The session's workspace (``None``: a session that touches no files)."""
        self._front = front
        """The session's one address (its speculation controller), speculation on or off:
        every command goes there; only the subscriptions go to each source of events."""
        self.pending_actions = pending_actions
        """This session's staged previews (``queue_resolve_handler``, standing handler)."""
        self.id = session_id
        self.hooks = hooks
        self._worker = worker
        self._state = state
        self._alert_sink = alert_sink
        self._events = EventQueue()
        self._alert_events = AlertEvents(session_id, self._events)
        self._closed = False
        self._pending_lock = threading.Lock()
        self._pending: dict[CancelScope, OnTheWay] = {}
        """The scopes of this object's submits and accepts still waiting for their answer
        (:meth:`cancel` cancels them), each with its place in :attr:`input_order`."""
        self.input_order = InputOrder(front)
        """Low level: keeps the keys typed after a submit or Tab behind it (:meth:`keystroke`);
        a relay that sends its own submits and Tabs (the Ray shard) registers them here."""
        self._final_usage: UsageSummary | None = None
        """The usage when the session closed (the runtime's ledger forgets it then)."""
        self._streams: weakref.WeakSet[EventStream] = weakref.WeakSet()
        self._events.on_close.append(self._close_streams)
        worker.ask(Subscribe(address=self._events), timeout=30)
        front.ask(Subscribe(address=self._events), timeout=30)
        if alert_sink is not None:
            alert_sink.ask(
                SubscribeAlerts(address=self._alert_events, session=session_id), timeout=30
            )

    def __repr__(self) -> str:
        return f"<Session {self.id}>"

    @property
    def worker(self) -> Handle[Worker]:
        """The worker's stable handle (low level: ``Session`` itself sends it only Subscribe)."""
        return self._worker

    @property
    def controller(self) -> Any:
        """The speculation controller's handle: the session's front door.

        (SubmitPrompt, Keystroke, AcceptSuggestion, GetSpeculation, AddTool ...)
        """
        return self._front

    @property
    def supervisor(self) -> Any:
        """The front door's older name (:attr:`controller`), kept for its callers."""
        return self._front

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- running -------------------------------------------------------------

    @overload
    def submit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        output_type: type[T],
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[T]: ...

    @overload
    def submit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        output_type: Any = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[Any]: ...

    def submit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        output_type: Any = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[Any]:
        """Run one turn; blocks until it ends or pauses (at most ``timeout`` seconds).

        ``output_type`` (a pydantic model, or any type pydantic validates:
        ``list[Item]``, ``int``, a dataclass ...) makes it a **structured**
        turn: the model is asked for a value of that type -- through the
        provider's JSON-schema response format or a ``final_answer`` tool,
        whichever the model supports (``OpenAICompatible(structured_output=...)``)
        -- and the answer is validated with ``pydantic.TypeAdapter``. An answer
        that does not validate is handed back with pydantic's errors, at most
        ``max_output_retries`` times (each re-ask is an LLM call and counts
        against ``max_turns``). The result's ``output`` is the validated value;
        when there is none, ``output_error`` says why. A type pydantic cannot
        handle raises :class:`~actors.output.schema.OutputTypeError` at once.

        ``usage_limits`` bound this turn's model requests and tokens (the
        session's own, from ``open_session``, apply too): the turn ends with
        status ``usage_limit`` the moment one is crossed.

        The run's cancel scope is made here, before the submit is sent, and
        travels with it (``SubmitPrompt.scope``): :meth:`cancel` cancels it
        wherever the submit is -- on its way to the worker (it is answered
        ``cancelled`` and never starts), or running.

        If ``timeout`` passes first, the run is **cancelled** (as by
        :meth:`cancel`; its on_abort hooks run if it had started) and
        ``pykka.Timeout`` is raised: a turn nobody waits for any more must not
        keep the session busy, so the next submit is not refused with
        ``WorkerBusy``. (It may queue behind the cancelled run's on_abort hooks.)

        Submitting exactly the current suggestion takes the accept path (the
        speculation's work is applied instead of being redone); it is never
        debounced -- only Tab is -- because typing and sending the text is an
        explicit request, not a double key press.
        """
        output = (
            None
            if output_type is None
            else output_request(output_type, max_retries=max_output_retries)
        )
        scope, future = self._send_submit(
            text, segments, max_turns, timeout, output, usage_limits=usage_limits
        )
        # Its run, or the submit itself if it has not even reached the worker yet.
        result: TurnResult = self._wait(scope, future, "the submit timed out")
        return result

    def _send_submit(
        self,
        text: str | None,
        segments: Sequence[Segment] | None,
        max_turns: int | None,
        timeout: float,
        output: OutputRequest | None = None,
        *,
        usage_limits: UsageLimits | None = None,
    ) -> tuple[CancelScope, PooledFuture[Any]]:
        """Send one submit with its run's scope (:meth:`cancel` reaches it anywhere);
        the scope and the answer."""
        frozen = tuple(segments) if segments is not None else None
        # Telemetry (issue 28): the caller's active span (telemetry on) becomes the turn's parent.
        trace = current_context(self.runtime.telemetry)
        # Through the front door, speculation on or off: submitting exactly the
        # suggestion takes the accept path; anything else aborts the speculation
        # first; the worker's answer comes straight back (forwarded reply).
        return self._send_scoped(
            lambda scope, arrived: SubmitPrompt(
                text=text,
                segments=frozen,
                max_turns=max_turns,
                scope=scope,
                output=output,
                usage_limits=usage_limits,
                trace=trace,
                arrived=arrived,
            ),
            timeout,
        )

    def _send_scoped(
        self, message: Callable[[CancelScope, OnTheWay], Any], timeout: float
    ) -> tuple[CancelScope, PooledFuture[Any]]:
        """Make the work's cancel scope, then ask the front door ``message(scope, arrived)``.

        The scope is made here, before anything is sent, and is pending until
        the answer is read (:meth:`_wait`, :meth:`_await`): :meth:`cancel`
        reaches the work through it wherever the work is -- on its way (the
        cancel may overtake it), waiting, or running. ``arrived`` is the
        message's place among the user's inputs (:mod:`supervision.input_order`):
        keys typed from now on reach the controller after it.
        """
        scope = CancelScope()
        arrived = self.input_order.sending()
        with self._pending_lock:
            self._pending[scope] = arrived
        try:
            future: PooledFuture[Any] = self._front.ask(
                message(scope, arrived), block=False, timeout=timeout
            )
        except BaseException:
            self._settled(scope)
            raise
        return scope, future

    def _settled(self, scope: CancelScope) -> None:
        """The work's answer was read (or its wait given up): the keys typed after it go
        now if it never arrived."""
        with self._pending_lock:
            arrived = self._pending.pop(scope, None)
        if arrived is not None:
            arrived()

    def _wait(self, scope: CancelScope, future: PooledFuture[Any], why: str) -> Any:
        """The answer of scoped work; past its deadline the work is cancelled (``why``)."""
        try:
            return future.get()
        except pykka.Timeout:
            scope.cancel(why)
            raise
        finally:
            self._settled(scope)

    async def _await(
        self, scope: CancelScope, future: PooledFuture[Any], timeout: float, why: str
    ) -> Any:
        """:meth:`_wait` for asyncio: cancelling the awaiting task cancels the work too."""
        try:
            return await wait_answer(future, timeout)
        except (asyncio.CancelledError, pykka.Timeout):
            scope.cancel(why)
            raise
        finally:
            self._settled(scope)

    @overload
    def ask(
        self,
        text: str | None = None,
        *,
        output_type: type[T],
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
    ) -> T: ...

    @overload
    def ask(
        self,
        text: str | None = None,
        *,
        output_type: Any,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
    ) -> Any: ...

    def ask(
        self,
        text: str | None = None,
        *,
        output_type: Any,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
    ) -> Any:
        """A structured turn's value: :meth:`submit` with ``output_type``, unwrapped.

        Raises :class:`~actors.output.contract.OutputValidationError` (its
        ``result`` is the whole ``TurnResult``) when the turn gave no valid
        value: the answers did not validate within ``max_output_retries``
        re-asks, or the run ended first (cancelled, failed, out of turns).
        """
        result = self.submit(
            text,
            segments=segments,
            timeout=timeout,
            max_turns=max_turns,
            output_type=output_type,
            max_output_retries=max_output_retries,
        )
        if result.output_error is not None or result.status != "completed":
            why = result.output_error or f"the run ended {result.status}"
            raise OutputValidationError(why, result)
        return result.output

    # -- suggestions and speculation ------------------------------------------------

    def keystroke(self, text: str = "", *, _at: float | None = None) -> None:
        """The user is typing ``text``: anything but a prefix of the suggestion aborts it.

        Told on the controller's control lane, so it aborts a speculation ahead of
        whatever mail waits there -- but never ahead of a :meth:`submit` or Tab
        (:meth:`accept`) sent before it: while one is on its way to the controller the
        key waits for it (:mod:`supervision.input_order`). (``_at``: when the key was
        pressed, for a caller that relays it, as the Ray shard.)
        """
        key = Keystroke(text=text) if _at is None else Keystroke(text=text, at=_at)
        self.input_order.keystroke(key)

    def accept(self, *, timeout: float = 60.0, wait_continuation: bool = True) -> AcceptResult:
        """Tab: accept the current suggestion (apply its speculation, or run it).

        The accept's cancel scope is made here and travels with it
        (``AcceptSuggestion.scope``): :meth:`cancel` calls it off wherever it
        is -- a Tab still on its way or waiting for its speculation answers
        ``aborted`` and nothing is applied; one already applying completes,
        but the turn it continues (or the normal run it became) is cancelled.
        If ``timeout`` passes first the accept is called off the same way and
        ``pykka.Timeout`` is raised.
        """
        scope, future = self._send_accept(wait_continuation, timeout)
        result: AcceptResult = self._wait(scope, future, GAVE_UP)
        return result

    def _send_accept(
        self, wait_continuation: bool, timeout: float
    ) -> tuple[CancelScope, PooledFuture[Any]]:
        return self._send_scoped(
            lambda scope, arrived: AcceptSuggestion(
                wait_continuation=wait_continuation, scope=scope, arrived=arrived
            ),
            timeout,
        )

    @property
    def suggestion(self) -> str | None:
        """The suggestion currently shown, if any.

        ``None`` until its display delay has passed (the ``SuggestionReady``
        event): what the user cannot see yet is not on offer, and Tab before
        then answers ``no_suggestion``.
        """
        _status, text = self._front.ask(GetSpeculation(), timeout=10)
        return text  # type: ignore[no-any-return]

    @property
    def speculation(self) -> SpeculationStatus:
        """A status snapshot of the current (or last) speculation."""
        status, _text = self._front.ask(GetSpeculation(), timeout=10)
        return status  # type: ignore[no-any-return]

    def resume(self, messages: Sequence[Item] = (), *, timeout: float = 60.0) -> TurnResult:
        """Continue a paused run; blocks until it ends or pauses again."""
        result: TurnResult = self._front.ask(Resume(messages=tuple(messages)), timeout=timeout)
        return result

    def pause(self, reason: str = "paused by request") -> bool:
        """Pause the running run before its next LLM request."""
        paused: bool = self._front.ask(PauseRun(reason=reason), timeout=10)
        return paused

    def cancel(self, reason: str = "cancelled by user") -> None:
        """Cancel the current run. Never waits.

        While a :meth:`submit` or :meth:`accept` of this session object is
        waiting, the cancel cancels its scope. A submit's run ends
        ``cancelled`` wherever the submit is -- still on its way to the worker
        (it is then answered ``cancelled`` without starting: nothing of it
        enters history), queued, or running. A Tab (:meth:`accept`) on its way
        or waiting for a running speculation is called off: it answers
        ``aborted`` and nothing is applied; the turn an accept started (a
        continuation, or the normal run it became) is cancelled. With nothing
        waiting, it cancels the run in progress, if any (``CancelRun``,
        control lane).
        """
        with self._pending_lock:
            pending = list(self._pending)
        if not pending:
            self._front.tell(CancelRun(reason=reason))
            return
        for scope in pending:
            scope.cancel(reason)

    # -- reading ----------------------------------------------------------------

    @property
    def history(self) -> tuple[Item, ...]:
        items: tuple[Item, ...] = self._front.ask(GetHistory(), timeout=10)
        return items

    @property
    def alerts(self) -> tuple[Alert, ...]:
        """This session's alerts, oldest first (bounded)."""
        if self._alert_sink is not None:
            alerts: tuple[Alert, ...] = self._alert_sink.ask(GetAlerts(session=self.id), timeout=10)
            return alerts
        return tuple(self._state.alerts)

    @property
    def usage(self) -> UsageSummary:
        """This session's model usage and cost so far, by purpose (main, suggestion,
        speculation, pipelined): what providers reported for completed requests,
        priced with the runtime's ``prices``."""
        if self._final_usage is not None:
            return self._final_usage
        return self.runtime.usage_ledger.session(self.id)

    def run_state(self) -> RunState:
        state: RunState = self._front.ask(GetRunState(), timeout=10)
        return state

    def events(self, timeout: float | None = None) -> Iterator[EventBase]:
        """Typed session events as they come.

        Ends when the session closes, or -- with ``timeout`` -- when no event
        arrives for that many seconds.
        """
        while True:
            event = self._events.get(timeout)
            if event is None:
                return
            yield event

    def drain_events(self) -> list[EventBase]:
        """Every buffered event, without waiting."""
        return self._events.drain()

    def add_tool(self, tool: Tool[Any] | Callable[..., Any]) -> None:
        """Offer one more tool to this session's model (names must stay unique).

        Like ``open_session(tools=...)``: a :class:`Tool`, or a plain or
        ``async`` function (made a tool as by ``@tool``; a function that cannot
        be one raises here, naming the parameter).

        With a session supervisor the change goes through it: the tools are
        part of every fork's cache-safe prefix, so a tool change makes the
        current speculation stale (it is aborted) before the worker gets it.
        """
        self._front.ask(AddTool(tool=as_tool(tool)), timeout=10)

    # -- forking (the session store, issue 25) -------------------------------------

    def fork(self) -> Session:
        """A new session (a new id) with a copy of this one's history, opened the same way.

        The same model, tools, hooks and settings; the copy is independent from
        here on (a "try another approach" from this point). On a runtime with
        a session store the copy is the store's -- every reported turn, which
        the write-ahead has saved -- and the fork is stored too; without one
        it is the history in memory.
        """
        if self._closed:
            raise RuntimeError(f"session {self.id!r} is closed")
        return self.runtime._fork(self.id)

    # -- approvals and the model (issue 24) --------------------------------------------

    @property
    def approval(self) -> ApprovalPolicy | None:
        """The live approval policy of normal turns (mode, "always" tools), if any."""
        live = self._state.approval
        return None if live is None else live.policy()

    def set_approval_mode(self, mode: ApprovalMode | str) -> None:
        """Switch the approval mode of normal turns and of speculation (never waits).

        Normal turns use it from their next tool call on. The speculation gate
        gets it too: a stricter mode aborts the speculation on offer (its work
        may hold what the new mode would ask about) and speculates on the
        suggestion again under the new mode; ``plan`` withdraws the suggestion
        and stops suggesting. A session opened without ``approval=`` gets a
        policy now, without an approver: what would ask is refused.
        """
        new = parse_approval_mode(mode)
        live = self._state.approval
        if live is None:
            self._state.approval = LiveApproval(
                ApprovalPolicy(mode=new), None, workspace=self.workspace
            )
        else:
            live.set_mode(new)
        self._front.tell(SetApprovalMode(mode=new))

    def set_model(self, model: Any, *, model_name: str = "", timeout: float = 30.0) -> None:
        """Talk to ``model`` from the next run on (``/model`` in ``fore chat``).

        Between turns only: while a run is in progress it raises
        :class:`~actors.worker.worker.WorkerBusy`. The suggestion and speculation
        made with the old model are withdrawn; later ones use the new model
        (unless the session has a ``fast_model``, which stays). ``model_name``
        is the wire name to send (default: ``model.name``).
        """
        target = self._front
        target.ask(SetModel(model=model, model_name=model_name), timeout=timeout)
        self.runtime._session_model_added(self.id, model)

    # -- asyncio (supervision/session_async.py) -----------------------------------------

    def stream(self, *, maxlen: int = DEFAULT_STREAM_MAXLEN) -> EventStream:
        """This session's events as an async iterator: ``async for event in s.stream()``.

        Call it on the event loop that reads it. Every event from this call on
        (typed events of the worker, the speculation and alerts), in the order
        each actor sent them; bounded (``maxlen``, the oldest dropped); ends
        when the session closes or at ``aclose()`` (or ``async with
        s.stream() as events``). Each call is an independent consumer; the
        blocking :meth:`events` is not affected.
        """
        loop = asyncio.get_running_loop()
        stream = EventStream(loop, maxlen=maxlen)
        if self._closed or self._events.closed:
            stream.close()
            return stream
        alerts = AlertEvents(self.id, stream.sink)

        def unsubscribe(sink: Any) -> None:
            for target, message in (
                (self._worker, Unsubscribe(address=sink)),
                (self._front, Unsubscribe(address=sink)),
                (self._alert_sink, UnsubscribeAlerts(address=alerts)),
            ):
                if target is not None:
                    tell_quietly(target, message)  # closed: it forgot every subscriber

        stream._on_close = unsubscribe
        self._streams.add(stream)
        # Tells, not asks: the loop never waits, and anything sent to these
        # actors after this call (a submit, an accept) reaches them after it.
        self._worker.tell(Subscribe(address=stream.sink))
        self._front.tell(Subscribe(address=stream.sink))
        if self._alert_sink is not None:
            self._alert_sink.tell(SubscribeAlerts(address=alerts, session=self.id))
        return stream

    def _close_streams(self) -> None:
        for stream in list(self._streams):
            stream.close()

    async def asubmit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        output_type: Any = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        usage_limits: UsageLimits | None = None,
    ) -> TurnResult[Any]:
        """:meth:`submit` for asyncio: awaits the turn without blocking the loop.

        Cancelling the awaiting task -- or ``timeout`` passing (then
        :class:`~actors.core.errors.AskTimeout`) -- cancels the run, as a
        timed-out :meth:`submit` does.
        """
        output = (
            None
            if output_type is None
            else output_request(output_type, max_retries=max_output_retries)
        )
        scope, future = self._send_submit(
            text, segments, max_turns, timeout, output, usage_limits=usage_limits
        )
        result: TurnResult[Any] = await self._await(
            scope, future, timeout, "the submit was cancelled"
        )
        return result

    async def aaccept(
        self, *, timeout: float = 60.0, wait_continuation: bool = True
    ) -> AcceptResult:
        """:meth:`accept` (Tab) for asyncio: awaits the accept without blocking the loop.

        Cancelling the awaiting task -- or ``timeout`` passing -- calls the
        accept off through its scope, as :meth:`cancel` does: a speculation
        still running is aborted and nothing is applied.
        """
        scope, future = self._send_accept(wait_continuation, timeout)
        why = "the accept was cancelled"
        result: AcceptResult = await self._await(scope, future, timeout, why)
        return result

    async def aresume(self, messages: Sequence[Item] = (), *, timeout: float = 60.0) -> TurnResult:
        """:meth:`resume` for asyncio."""
        future = self._front.ask(Resume(messages=tuple(messages)), block=False, timeout=timeout)
        result: TurnResult = await wait_answer(future, timeout)
        return result

    async def aclose(self, timeout: float = 30.0) -> bool:
        """:meth:`close` for asyncio (the wait for the overlays runs on a thread)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.close, timeout)

    # -- closing -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the session's actors and free everything it held.

        Returns only once its speculations' overlays are removed, or ``timeout``
        has passed: False then, and the overlays left are logged with the
        reason (``session_close_overlays_left``).
        """
        if self._closed:
            return True
        self._closed = True
        try:
            self._front.tell(AbortSpeculation(reason="session closed"))
            self._front.tell(Unsubscribe(address=self._events))
            self._worker.ask(Unsubscribe(address=self._events), timeout=5)
            if self._alert_sink is not None:
                self._alert_sink.tell(UnsubscribeAlerts(address=self._alert_events))
        except Exception:
            pass
        left = self.runtime._close_session(self.id, timeout=timeout)
        self._final_usage = self.runtime._final_usage(self.id)
        self._events.close()
        return not left
