"""A session on a shard, driven from the caller's process: the ``Session`` API over Ray.

:class:`RemoteSession` has the methods of :class:`~fore.supervision.session.Session`
-- ``submit``, ``accept``, ``keystroke``, ``events``, ``stream``, ``close`` and
the rest -- and answers them the same way (the same ``TurnResult`` and
``AcceptResult``, the same exceptions: the shard's exception is re-raised
here, not wrapped). Every call goes straight to the actor handle of the shard
that hosts the session: no router process in between.

What is new is the failure a process boundary brings: the shard can die
under a call. The call then raises :class:`~fore.distributed.errors.ShardLost`;
the session is resumed from the store on a live shard (by the runtime's
monitor, or by the next call, whichever comes first) and the next call goes
there. A call that found the session gone from a *restarted* shard never ran
there, so it is sent again after the move instead of failing.

:attr:`RemoteSession.worker` and :attr:`RemoteSession.supervisor` are
message-level handles (:class:`RemoteHandle`: ``tell``, ``ask``, and
``ask(block=False)`` returning a future that pooled actors can ``ask_then``
on), as the local session's handles are.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fore.actors.core.errors import AskTimeout
from fore.actors.core.future import PooledFuture
from fore.actors.core.logs import get_logger
from fore.actors.gate.tool_gate import parse_approval_mode
from fore.actors.tools.base import Tool
from fore.distributed import calls, shipping
from fore.distributed.calls import _Died, _NotHere
from fore.distributed.errors import ShardLost
from fore.distributed.placement import ShardInfo
from fore.messages.alerts import Alert, GetAlerts
from fore.messages.conversation import Item, Segment
from fore.messages.gate import ApprovalMode
from fore.messages.session import (
    AddTool,
    EventBase,
    GetHistory,
    GetRunState,
    PauseRun,
    Resume,
    RunState,
    TurnResult,
)
from fore.messages.speculation import (
    AcceptResult,
    GetSpeculation,
    Keystroke,
    SpeculationStatus,
)

if TYPE_CHECKING:
    from fore.distributed.runtime import RayRuntime
    from fore.distributed.spec import SessionSpec

log = get_logger(__name__)

__all__ = ["RemoteHandle", "RemoteSession"]

GRACE_S = 10.0
"""How much longer than a call's own deadline the caller waits for the shard's answer
(the shard enforces the deadline; this only bounds a shard that stopped answering)."""


@dataclass(frozen=True)
class Placement:
    """Where a session is: the shard's index, the incarnation that hosts it, its handle."""

    index: int
    incarnation: str
    handle: Any
    info: ShardInfo
    inputs: Iterator[int] = field(default_factory=itertools.count, compare=False, repr=False)
    """The numbers of the session's user inputs sent to this hosting, from 0: the shard
    starts them in this order (:mod:`fore.distributed.input_sequence`); a move starts a new
    placement, and the new hosting's numbers, at 0."""


class RemoteHandle:
    """Message-level access to one of a remote session's actors (``worker``, ``supervisor``).

    ``tell`` and ``ask`` take the same messages as the local handles. A message
    naming an address in this process (``Subscribe``) is refused: use
    :meth:`RemoteSession.forward_events`.
    """

    def __init__(self, session: RemoteSession, target: str) -> None:
        self._session = session
        self._target = target

    def __repr__(self) -> str:
        return f"<RemoteHandle {self._target} of {self._session.id}>"

    def tell(self, message: Any) -> None:
        if isinstance(message, Keystroke):
            self._session.keystroke(message.text, _at=message.at)
            return
        self._session._tell("tell", self._target, message)

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        limit = 60.0 if timeout is None else timeout
        if block:
            return self._session._call("ask", self._target, message, limit, timeout=limit)
        return self._session._call_async("ask", self._target, message, limit, timeout=limit)


class RemoteSession:
    """One session hosted by a shard (module docs). Made by :class:`RayRuntime`."""

    def __init__(self, runtime: RayRuntime, spec: SessionSpec, placement: Placement) -> None:
        self.id = spec.session_id
        self._runtime = runtime
        self.spec = spec
        self._placement = placement
        self.lock = threading.RLock()
        """Held while the session is moved to another shard."""
        self.lost: str | None = None
        """Why the session must move (its shard died), until it has."""
        self._closed = False
        self._stream: Any = None
        self._stream_placement: Placement | None = None
        self._buffer: deque[Any] = deque()
        self._tells: set[Any] = set()
        self.worker = RemoteHandle(self, "worker")
        self.supervisor = RemoteHandle(self, "supervisor")
        self.moves = 0
        """How many times the session was resumed on another shard."""

    def __repr__(self) -> str:
        return f"<RemoteSession {self.id} on shard #{self._placement.index}>"

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- where it is -------------------------------------------------------------------------

    @property
    def placement(self) -> Placement:
        return self._placement

    @property
    def shard(self) -> ShardInfo:
        """The shard (and process) hosting the session now."""
        return self._placement.info

    def _moved(self, placement: Placement) -> None:
        """The runtime resumed the session on ``placement`` (called under :attr:`lock`)."""
        self._placement = placement
        self.lost = None
        self.moves += 1

    # -- plumbing ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"session {self.id!r} is closed")

    def _call(self, method: str, *args: Any, timeout: float, numbered: bool = False) -> Any:
        """``method`` of the session's shard, answered (module docs for the failures);
        ``numbered``: a user input, started there in the order the user gave it."""
        self._check_open()
        for attempt in (1, 2):
            placement = self._runtime._ensure_placed(self)
            ref, _seq = _send(placement, method, self.id, args, numbered)
            try:
                return calls.result(ref, timeout + GRACE_S)
            except (_NotHere, _Died) as exc:
                # A restarted shard never ran the call: moved, it is sent once more.
                lost = self._shard_failed(placement, exc)
                if isinstance(exc, _Died) or attempt == 2:
                    raise lost from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _shard_failed(self, placement: Placement, exc: _NotHere | _Died) -> ShardLost:
        """What a failed call to ``placement``'s shard means, the same for every kind of
        call: a restarted shard moves the session, a dead one is marked dead; the answer
        is the :class:`ShardLost` to give the caller if the call is not sent again."""
        if isinstance(exc, _NotHere):
            self._runtime._session_lost(self, placement, "its shard was restarted")
            return ShardLost(self.id, placement.index, "restarted")
        self._runtime._shard_died(placement)
        return ShardLost(self.id, placement.index, exc.detail)

    def _call_async(self, method: str, *args: Any, timeout: float) -> PooledFuture[Any]:
        """Like :meth:`_call`, answered through a future (for ``ask_then``)."""
        self._check_open()
        future: PooledFuture[Any] = PooledFuture(time.monotonic() + timeout + GRACE_S)
        placement = self._runtime._ensure_placed(self)
        ref = calls.method(placement.handle, method).remote(self.id, *args)

        def settle(_done: Any) -> None:
            try:
                future.try_set(calls.result(ref, 0.0))
            except (_NotHere, _Died) as exc:
                future.try_set_exception(self._shard_failed(placement, exc))
            except BaseException as exc:
                future.try_set_exception(exc)

        ref.future().add_done_callback(settle)
        return future

    def _tell(self, method: str, *args: Any, numbered: bool = False) -> None:
        """A call nobody waits for (a keystroke, a cancel); its failure moves the session."""
        self._check_open()
        placement = self._runtime._ensure_placed(self)
        ref, _seq = _send(placement, method, self.id, args, numbered)
        self._tells.add(ref)

        def done(_done: Any) -> None:
            self._tells.discard(ref)
            try:
                calls.result(ref, 0.0)
            except (_NotHere, _Died) as exc:
                self._shard_failed(placement, exc)
            except Exception as exc:  # a tell has nobody to tell: the log has it
                log.warning("remote_tell_failed", session=self.id, error=repr(exc))

        ref.future().add_done_callback(done)

    # -- running -------------------------------------------------------------------------------

    def submit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
    ) -> TurnResult:
        """Run one turn on the shard; as ``Session.submit`` (a timed-out turn is cancelled).

        Raises :class:`ShardLost` if the shard dies meanwhile: the turn is then
        in the store (if it had completed) or not at all.
        """
        frozen = tuple(segments) if segments is not None else None
        result: TurnResult = self._call(
            "submit", text, frozen, timeout, max_turns, timeout=timeout, numbered=True
        )
        return result

    def accept(self, *, timeout: float = 60.0, wait_continuation: bool = True) -> AcceptResult:
        """Tab: accept the current suggestion (its speculation's work is applied on the shard)."""
        result: AcceptResult = self._call(
            "accept", timeout, wait_continuation, timeout=timeout, numbered=True
        )
        return result

    def keystroke(self, text: str = "", *, _at: float | None = None) -> None:
        """The user is typing ``text``; returns at once (anything but a prefix of the suggestion
        aborts its speculation). Abort latency is timed from this call when the shard is on
        this machine."""
        at = _at if _at is not None else time.monotonic()
        local = self._placement.info.node_id == self._runtime.node_id
        self._tell("keystroke", text, at if local else None, numbered=True)

    def cancel(self, reason: str = "cancelled by user") -> None:
        """Cancel the running run (or this session's submits still on their way)."""
        self._tell("cancel", reason, numbered=True)

    def pause(self, reason: str = "paused by request") -> bool:
        paused: bool = self.worker.ask(PauseRun(reason=reason), timeout=10)
        return paused

    def resume(self, messages: Sequence[Item] = (), *, timeout: float = 60.0) -> TurnResult:
        """Continue a paused run."""
        result: TurnResult = self.worker.ask(Resume(messages=tuple(messages)), timeout=timeout)
        return result

    def fork(self, *, timeout: float = 60.0) -> RemoteSession:
        """A new session (a new id) with a copy of this one's history, opened the same way.

        As ``Session.fork()``, on this session's shard (where its workspace is):
        the copy is the store's -- every reported turn -- and the fork is stored
        too, so it is resumed elsewhere like any session if its shard dies.
        """
        new_id, info = self._call("fork", timeout=timeout)
        return self._runtime._adopt(self.spec, new_id, info)

    def add_tool(self, tool: Tool[Any]) -> None:
        """Offer one more tool (it is shipped to the shard and runs there)."""
        target = self.supervisor if self.spec.speculation else self.worker
        target.ask(AddTool(tool=tool), timeout=10)

    def set_approval_mode(self, mode: ApprovalMode | str) -> None:
        """As ``Session.set_approval_mode``, on the shard (normal turns and speculation);
        returns once the shard has it."""
        self._call("set_approval_mode", parse_approval_mode(mode), timeout=10.0)

    def set_model(self, model: Any, *, model_name: str = "", timeout: float = 30.0) -> None:
        """As ``Session.set_model`` (between turns only): ``model`` is shipped to the shard,
        runs there from the next run on and is closed there with the session."""
        spec = self.spec.with_model(model, model_name)  # shipped: NotShippable here if not
        self._call(
            "set_model", shipping.dumps(model, what="model"), model_name, timeout, timeout=timeout
        )
        self.spec = spec  # a move after this opens the session with the new model

    # -- asyncio -----------------------------------------------------------------------------
    #
    # The same calls, awaited on the caller's event loop without a thread: a Ray
    # object ref is awaitable. Cancelling the awaiting task does what cancelling a
    # local ``asubmit`` / ``aaccept`` does (the run is cancelled, the Tab called off).

    async def _aplacement(self) -> Placement:
        placement = self._placement
        if self._runtime._placed_here(self, placement):
            return placement
        return await asyncio.to_thread(self._runtime._ensure_placed, self)  # a move: blocking

    async def _acall(
        self,
        method: str,
        *args: Any,
        timeout: float,
        on_cancel: Callable[[Any], object] | None = None,
        numbered: bool = False,
        withdraw_on_cancel: bool = False,
    ) -> Any:
        """:meth:`_call` for asyncio (the same failures; ``on_cancel(ref)`` runs with the
        call's Ray object ref if the awaiting task is cancelled). ``withdraw_on_cancel``:
        ``on_cancel`` cancels the call, which may then never reach the shard, so its
        number is withdrawn there too (the inputs after it need not wait ``HOLD_S``)."""
        self._check_open()
        for attempt in (1, 2):
            placement = await self._aplacement()
            ref, seq = _send(placement, method, self.id, args, numbered)
            try:
                return await asyncio.wait_for(calls.aresult(ref), timeout + GRACE_S)
            except TimeoutError:
                raise AskTimeout("the shard did not answer before the call's deadline") from None
            except asyncio.CancelledError:
                if on_cancel is not None:
                    on_cancel(ref)
                if withdraw_on_cancel and seq is not None:
                    calls.withdraw(placement.handle, self.id, seq)
                raise
            except (_NotHere, _Died) as exc:
                lost = self._shard_failed(placement, exc)
                if isinstance(exc, _Died) or attempt == 2:
                    raise lost from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _tell_quietly(self, method: str, *args: Any, numbered: bool = False) -> None:
        try:
            self._tell(method, *args, numbered=numbered)
        except Exception as exc:  # closed, or no shard to tell: nothing left to call off
            log.warning("remote_tell_failed", session=self.id, error=repr(exc))

    async def asubmit(
        self,
        text: str | None = None,
        *,
        segments: Sequence[Segment] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
    ) -> TurnResult:
        """:meth:`submit` for asyncio. Cancelling the awaiting task cancels the run on the
        shard, as a timed-out submit does."""
        frozen = tuple(segments) if segments is not None else None
        result: TurnResult = await self._acall(
            "submit",
            text,
            frozen,
            timeout,
            max_turns,
            timeout=timeout,
            on_cancel=lambda _ref: self._tell_quietly(
                "cancel", "the submit was cancelled", numbered=True
            ),
            numbered=True,
        )
        return result

    async def aaccept(
        self, *, timeout: float = 60.0, wait_continuation: bool = True
    ) -> AcceptResult:
        """:meth:`accept` (Tab) for asyncio. Cancelling the awaiting task calls the accept
        off: a speculation still running is aborted and nothing is applied.

        The call itself is cancelled (``ray.cancel``): one the shard has not started
        never runs, and a running one cancels its accept's scope (the shard's
        ``accept``), so the cancel cannot be overtaken by the Tab it cancels.
        """
        result: AcceptResult = await self._acall(
            "accept",
            timeout,
            wait_continuation,
            timeout=timeout,
            on_cancel=calls.cancel,
            numbered=True,
            withdraw_on_cancel=True,
        )
        return result

    async def aresume(self, messages: Sequence[Item] = (), *, timeout: float = 60.0) -> TurnResult:
        """:meth:`resume` for asyncio."""
        message = Resume(messages=tuple(messages))
        result: TurnResult = await self._acall("ask", "worker", message, timeout, timeout=timeout)
        return result

    async def aclose(self, timeout: float = 30.0) -> bool:
        """:meth:`close` for asyncio (on a thread: a close may wait for a move)."""
        return await asyncio.to_thread(self.close, timeout)

    # -- reading --------------------------------------------------------------------------------

    @property
    def suggestion(self) -> str | None:
        _status, text = self.supervisor.ask(GetSpeculation(), timeout=10)
        return text  # type: ignore[no-any-return]

    @property
    def speculation(self) -> SpeculationStatus:
        status, _text = self.supervisor.ask(GetSpeculation(), timeout=10)
        return status  # type: ignore[no-any-return]

    @property
    def history(self) -> tuple[Item, ...]:
        items: tuple[Item, ...] = self.worker.ask(GetHistory(), timeout=10)
        return items

    @property
    def alerts(self) -> tuple[Alert, ...]:
        alerts: tuple[Alert, ...] = self._call(
            "ask", "alerts", GetAlerts(session=self.id), 10.0, timeout=10.0
        )
        return alerts

    def run_state(self) -> RunState:
        state: RunState = self.worker.ask(GetRunState(), timeout=10)
        return state

    # -- events -----------------------------------------------------------------------------------

    def _generator(self) -> Any:
        """The session's event stream from its current shard (started on first use)."""
        placement = self._runtime._ensure_placed(self)
        if self._stream is None or self._stream_placement is not placement:
            self._stream = placement.handle.events.remote(self.id, None)
            self._stream_placement = placement
        return self._stream

    def _stream_failed(self, exc: BaseException) -> None:
        placement = self._stream_placement
        self._stream = None
        self._stream_placement = None
        if placement is None:
            return
        if isinstance(exc, _NotHere):
            self._runtime._session_lost(self, placement, "its shard was restarted")
        else:
            self._runtime._shard_died(placement)
        raise ShardLost(self.id, placement.index, getattr(exc, "detail", "")) from None

    def events(self, timeout: float | None = None) -> Iterator[EventBase]:
        """The session's events as they come, in order, from the shard.

        Ends when the session closes, or -- with ``timeout`` -- when no event
        arrives for that many seconds. One reader at a time (``events``,
        ``stream`` or :meth:`forward_events`). Raises :class:`ShardLost` if the
        shard dies; the next call reads from the shard the session moved to.
        """
        while True:
            if self._buffer:
                yield self._buffer.popleft()
                continue
            if self._closed:
                return
            batch = self._next_batch(timeout)
            if batch is None:
                return
            self._buffer.extend(batch)

    def _next_batch(self, timeout: float | None) -> list[Any] | None:
        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            generator = self._generator()
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            ready, _ = ray.wait([generator], timeout=wait)
            if ready:
                try:
                    ref = next(generator)
                except StopIteration:
                    self._stream = None
                    return None
                try:
                    batch: list[Any] = calls.result(ref, GRACE_S)
                except (_NotHere, _Died) as exc:
                    self._stream_failed(exc)
                return batch
            if self._closed or (deadline is not None and time.monotonic() >= deadline):
                return None

    def drain_events(self) -> list[EventBase]:
        """Every event that has arrived, without waiting."""
        events = list(self._buffer)
        self._buffer.clear()
        while True:
            batch = self._next_batch(0.0)
            if not batch:
                return events
            events.extend(batch)

    async def stream(self) -> AsyncIterator[EventBase]:
        """The session's events as an async iterator (``async for event in session.stream()``).

        The same stream as :meth:`events` (one reader at a time); ends when the
        session closes; raises :class:`ShardLost` if the shard dies.
        """
        while True:
            if self._buffer:
                yield self._buffer.popleft()
                continue
            if self._closed:
                return
            generator = await asyncio.to_thread(self._generator)
            try:
                ref = await generator.__anext__()
            except StopAsyncIteration:
                self._stream = None
                return
            try:
                batch = await calls.aresult(ref)
            except (_NotHere, _Died) as exc:
                self._stream_failed(exc)
            self._buffer.extend(batch)

    def forward_events(self, address: Any, kinds: Collection[str] | None = None) -> None:
        """Deliver this session's events to ``address.tell(event)`` (an actor ref, a queue).

        From the runtime's event thread, in order; ``kinds`` keeps only events
        of those class names (the others never leave the shard). It follows the
        session when it moves; it ends when the session closes. One reader at a
        time: it replaces :meth:`events` / :meth:`stream`.
        """
        self._check_open()
        self._runtime._forward(self, address, None if kinds is None else tuple(kinds))

    # -- closing --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Close the session on its shard (its last turn written, its lease released).

        Returns False if it left overlays behind (as ``Session.close``) or its
        shard could not be reached (the session then stays in the store, and
        can be resumed).
        """
        if self._closed:
            return True
        try:
            clean: bool = self._call("close_session", timeout, timeout=timeout)
        except (ShardLost, AskTimeout) as exc:
            log.warning("remote_session_close_failed", session=self.id, error=str(exc))
            clean = False
        finally:
            self._closed = True
            self._runtime._forget(self)
        return clean


def _send(
    placement: Placement, method: str, session_id: str, args: Any, numbered: bool
) -> tuple[Any, int | None]:
    """Call ``method`` of ``placement``'s shard: its ref, and its number if a user input."""
    bound = calls.method(placement.handle, method)
    if numbered:
        seq = next(placement.inputs)
        return bound.remote(session_id, *args, seq=seq), seq
    return bound.remote(session_id, *args), None


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]
