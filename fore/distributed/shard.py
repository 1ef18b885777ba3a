"""A shard: one process hosting a Fore ``Runtime`` and the sessions placed on it.

:class:`ShardServer` is plain Python with ``async`` methods; the distributed
runtime runs it as a Ray actor (``ray.remote(ShardServer)``: an *async actor*,
so one event loop serves every session of the shard and a turn in progress
holds no thread while it waits). Nothing here imports Ray except to ask which
machine the shard is on, so the class is tested in-process as well.

**Never on the loop, never a thread per turn.** The hot calls -- a submit, a
Tab, a keystroke, a status read -- are asks to the session's actors whose
pykka futures are bridged to asyncio futures by a done-callback
(:func:`_bridged`), each with its own deadline; a keystroke is a ``tell`` on
the control lane and returns at once. Blocking work (opening and closing a
session, the store) runs on the loop's executor threads.

**Durable before reported.** The shard's ``Runtime`` has the shared session
store (``Runtime(store=...)``, issue #25): a session opened here is created in
the store and leased to this process, and its worker writes each turn's items
(a Tab's accepted items and its continuation included) before the turn is
reported -- so a shard that dies loses only the turn in flight. A session
whose shard died is opened on another with ``Runtime.resume_session``, which
leases it here (at once from a dead holder of this machine) and restores its
history before anything else can reach it.

**The user's order.** A submit, a Tab, a keystroke and a cancel carry the caller's
number (``seq``: :mod:`fore.distributed.input_sequence`), and each enters the hosted
session's input order (:class:`~fore.supervision.input_order.InputOrder`) in that
order, whatever order Ray runs the calls in: one that is ahead waits (at most
``HOLD_S``) for those before it. Without ``seq`` (a caller in this process) a call
enters at once.

**Events** of a session are collected in an :class:`~fore.distributed.events.EventSink`
(the session's own in-process queue is unsubscribed) and leave through the
``events`` streaming generator, in order, a batch per wake-up.

(Over 600 lines as one concept: the shard's side of every call a caller makes.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fore.actors.core.cancel import CancelScope
from fore.actors.core.errors import AskTimeout
from fore.actors.core.future import PooledFuture
from fore.actors.core.logs import configure_logging, get_logger
from fore.actors.speculation.accept import GAVE_UP
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.store import SessionLeased, SessionStore, StoreError, open_store
from fore.distributed import shipping
from fore.distributed.errors import WorkspaceUnreachable
from fore.distributed.events import AlertForwarder, EventSink
from fore.distributed.input_sequence import InputSequence
from fore.distributed.leaks import LeakBaseline, count_overlay_dirs
from fore.distributed.placement import ShardInfo, ShardLoad
from fore.distributed.spec import RESUMABLE_OPTIONS, SessionSpec
from fore.errors import ForeError, InputWithdrawn, SessionNotHere
from fore.messages.alerts import SubscribeAlerts, UnsubscribeAlerts
from fore.messages.conversation import Segment
from fore.messages.gate import ApprovalMode
from fore.messages.session import (
    CancelRun,
    Submit,
    Subscribe,
    TurnResult,
    Unsubscribe,
)
from fore.messages.speculation import (
    AbortSpeculation,
    AcceptResult,
    AcceptSuggestion,
    SubmitPrompt,
)
from fore.supervision.input_order import OnTheWay
from fore.supervision.runtime import Runtime
from fore.supervision.session import Session

log = get_logger(__name__)

__all__ = ["SessionNotHere", "ShardConfig", "ShardServer"]

TARGETS = ("worker", "supervisor", "alerts")
"""What a remote ask or tell can address: the session's worker, its supervisor, or
the runtime's alert sink."""


@dataclass(frozen=True)
class ShardConfig:
    """How every shard of a distributed runtime is set up (the same for all of them)."""

    store_url: str
    blob_dir: str | None = None
    """Shared by the shards (a resumed session's ``[blob:…]`` references must resolve)."""
    overlay_root: str | None = None
    tune_process: bool = True
    """A shard owns its process: the GC and GIL settings of a many-session service."""
    governor: dict[str, Any] = field(default_factory=dict)
    """:class:`LoadGovernor` keywords (``enabled``, ``threshold_ms`` ...)."""
    runtime_options: dict[str, Any] = field(default_factory=dict)
    """Other ``Runtime`` keywords (``max_running_tools`` ...)."""
    lease_ttl: float = 30.0
    """How long a session's lease lives unrenewed (the shard's store renews it meanwhile)."""
    log_level: str | None = None
    """Set: the shard is a process of its own (a Ray actor) and logs Fore's events at this
    level to its stderr (Ray's worker log file), as the ``fore`` CLI does. ``None``:
    logging is the host's business (a shard object in someone else's process)."""
    resume_wait_s: float = 60.0
    """How long a resume waits for a session's lease held by a process not known to be
    dead (another machine's shard that stopped renewing): at most one lease TTL is needed."""


@dataclass
class _Hosted:
    spec: SessionSpec
    session: Session
    sink: EventSink
    alerts: AlertForwarder
    pending: set[CancelScope] = field(default_factory=set)
    """The scopes of the submits and Tabs still waiting for their answer (``cancel`` cancels
    them)."""
    models: tuple[Any, ...] = ()
    """The shard's copies of the session's models: closed with the last session using
    them (a fork shares its source's)."""
    inputs: InputSequence = field(default_factory=InputSequence)
    """The user's inputs of this hosting, started in the caller's order (numbers from 0)."""

    def target(self, name: str) -> Any:
        if name == "worker":
            return self.session.worker
        if name == "supervisor":
            return self.session.controller
        if name == "alerts":
            return self.session.runtime.alert_sink
        raise ValueError(f"unknown target {name!r}; one of {', '.join(TARGETS)}")


def _settle(target: asyncio.Future[Any], source: PooledFuture[Any]) -> None:
    if target.done():
        return
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.get(timeout=0))


async def _bridged(future: PooledFuture[Any], timeout: float) -> Any:
    """The answer of a pykka future, awaited on this loop, or ``AskTimeout`` at ``timeout``."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()

    def done(f: PooledFuture[Any]) -> None:
        try:
            loop.call_soon_threadsafe(_settle, waiter, f)
        except RuntimeError:  # the loop closed: nobody waits any more
            pass

    future.add_done_callback(done)
    try:
        return await asyncio.wait_for(waiter, timeout)
    except TimeoutError:
        raise AskTimeout("ask not answered before its deadline") from None


def _wake(waiter: asyncio.Future[None], error: BaseException | None = None) -> None:
    """End a held input's wait: its turn came (no ``error``), or it never will."""
    if waiter.done():
        return
    if error is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(error)


def _node() -> tuple[str, str]:
    """This process's Ray node id and IP (``local`` outside a Ray worker)."""
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
            return context.get_node_id(), str(node_ip)
    except Exception:  # not in a Ray process, or Ray cannot say
        pass
    return "local", "127.0.0.1"


class ShardServer:
    """The shard's side of every call (module docs); one instance per shard process."""

    def __init__(self, index: int, config: ShardConfig) -> None:
        self.index = index
        self.config = config
        if config.log_level is not None:
            configure_logging(level=config.log_level)
        self.incarnation = uuid.uuid4().hex[:12]
        # Ray's own connections (asking it which node this is) before the baseline:
        # the leak counters count what the runtime leaves, not Ray.
        node_id, node_ip = _node()
        self._baseline = LeakBaseline()
        self.governor = LoadGovernor(**config.governor)
        # The store is opened here, not from the URL by the runtime, for its lease TTL
        # (a Runtime opens a URL with the default one); the runtime writes every
        # session's turns through it, and the shard closes it after the runtime.
        self.store: SessionStore = open_store(config.store_url, lease_ttl=config.lease_ttl)
        try:
            self.runtime = Runtime(
                name=f"shard{index}",
                blob_dir=config.blob_dir,
                overlay_root=config.overlay_root,
                speculation_governor=self.governor,
                tune_process=config.tune_process,
                store=self.store,
                **config.runtime_options,
            )
        except BaseException:
            self.store.close()
            raise
        self._hosted: dict[str, _Hosted] = {}
        self._closed = False
        self._info = ShardInfo(
            index=index,
            incarnation=self.incarnation,
            pid=os.getpid(),
            node_id=node_id,
            node_ip=node_ip,
            hostname=socket.gethostname(),
        )
        log.info("shard_started", shard=index, incarnation=self.incarnation, pid=os.getpid())

    # -- who and how busy ---------------------------------------------------------------

    async def info(self) -> ShardInfo:
        return self._info

    async def load(self) -> ShardLoad:
        governor = self.governor
        return ShardLoad(
            index=self.index,
            incarnation=self.incarnation,
            node_id=self._info.node_id,
            alive=not self._closed,
            pressure_ms=governor.pressure_ms(),
            threshold_ms=governor.threshold_ms,
            sessions=len(self._hosted),
            running_speculations=governor.running,
            admitted=governor.admitted,
            refused=governor.refused,
            deferred=governor.deferred,
        )

    async def status(self) -> tuple[ShardInfo, ShardLoad]:
        """Who and how busy, in one call (the runtime's monitor polls this)."""
        return self._info, await self.load()

    async def sessions(self) -> list[str]:
        """The ids of the sessions open here."""
        return list(self._hosted)

    # -- opening ------------------------------------------------------------------------

    async def open(self, spec: SessionSpec, resume: bool = False) -> ShardInfo:
        """Open ``spec``'s session here (``resume``: from the store); returns who hosts it now.

        A new session is created in the store by the runtime, leased to this
        shard; a resumed one is leased here by ``Runtime.resume_session``, its
        stored history restored before anything else can reach it.
        """
        if self._closed:
            raise ForeError(f"shard #{self.index} is shutting down")
        sid = spec.session_id
        if sid in self._hosted:
            raise ValueError(f"session {sid!r} is already open on shard #{self.index}")
        if spec.workspace is not None and not Path(spec.workspace).is_dir():
            raise WorkspaceUnreachable(
                f"workspace {spec.workspace!r} is not a directory on {self._info.hostname} "
                f"(shard #{self.index}); a shard serves only workspaces on its own machine"
            )
        opener = self._resume_runtime_session if resume else self._open_runtime_session
        session, models = await asyncio.to_thread(opener, spec)
        try:
            hosted = await self._attach(spec, session)
            hosted.models = models
        except BaseException:
            await asyncio.to_thread(session.close)  # its lease goes with it
            _close_models(models)
            raise
        self._hosted[sid] = hosted
        log.info("shard_session_opened", shard=self.index, session=sid, resumed=resume)
        return self._info

    def _open_runtime_session(self, spec: SessionSpec) -> tuple[Session, tuple[Any, ...]]:
        kwargs = spec.open_kwargs()
        model = kwargs.pop("model")
        session = self.runtime.open_session(
            workspace=spec.workspace, model=model, session_id=spec.session_id, **kwargs
        )
        return session, (model, kwargs.get("fast_model"))

    def _resume_runtime_session(self, spec: SessionSpec) -> tuple[Session, tuple[Any, ...]]:
        """``Runtime.resume_session``, waiting out a lease holder not known to be dead."""
        kwargs = spec.open_kwargs()
        model = kwargs.pop("model")
        again = {k: v for k, v in kwargs.items() if k in RESUMABLE_OPTIONS}
        deadline = time.monotonic() + self.config.resume_wait_s
        while True:
            try:
                session = self.runtime.resume_session(
                    spec.session_id, model=model, workspace=spec.workspace, **again
                )
                return session, (model, kwargs.get("fast_model"))
            except SessionLeased as exc:
                if time.monotonic() + min(1.0, exc.expires_in) > deadline:
                    raise
                time.sleep(min(1.0, max(0.05, exc.expires_in)))

    async def _attach(self, spec: SessionSpec, session: Session) -> _Hosted:
        """Send the session's events to a sink of ours instead of its in-process queue."""
        sid = spec.session_id
        sink = EventSink(sid)
        alerts = AlertForwarder(sid, sink)
        hosted = _Hosted(spec=spec, session=session, sink=sink, alerts=alerts)
        # The in-process queue would fill up with nobody reading it: it goes
        # (its events so far are the restored history's, of no interest).
        own_queue = getattr(session, "_events", None)
        own_alerts = getattr(session, "_alert_events", None)
        worker, supervisor, alert_sink = (
            session.worker,
            session.controller,
            session.runtime.alert_sink,
        )
        await _bridged(worker.ask(Subscribe(address=sink), block=False), 30.0)
        await _bridged(supervisor.ask(Subscribe(address=sink), block=False), 30.0)
        await _bridged(
            alert_sink.ask(SubscribeAlerts(address=alerts, session=sid), block=False), 30.0
        )
        if own_queue is not None:
            worker.tell(Unsubscribe(address=own_queue))
            supervisor.tell(Unsubscribe(address=own_queue))
            own_queue.drain()
        if own_alerts is not None:
            alert_sink.tell(UnsubscribeAlerts(address=own_alerts))
        return hosted

    # -- calls ----------------------------------------------------------------------------

    def _get(self, session_id: str) -> _Hosted:
        hosted = self._hosted.get(session_id)
        if hosted is None:
            raise SessionNotHere(session_id, self.index)
        return hosted

    async def submit(
        self,
        session_id: str,
        text: str | None = None,
        segments: tuple[Segment, ...] | None = None,
        timeout: float = 60.0,
        max_turns: int | None = None,
        *,
        seq: int | None = None,
    ) -> TurnResult:
        """``Session.submit`` on this shard: a timed-out turn is cancelled, as in one process
        (through the run's scope, made here before the submit is sent)."""
        hosted = self._get(session_id)
        session = hosted.session
        scope = CancelScope()
        entered: list[OnTheWay] = []

        def enter() -> None:
            hosted.pending.add(scope)
            entered.append(session.input_order.sending())  # later keys wait for it

        try:
            await self._in_turn(hosted, seq, enter, timeout)
            arrived = entered[0]
            if hosted.spec.speculation:
                prompt = SubmitPrompt(
                    text=text, segments=segments, max_turns=max_turns, scope=scope, arrived=arrived
                )
                future = session.controller.ask(prompt, block=False, timeout=timeout)
            else:
                message = Submit(text=text, segments=segments, max_turns=max_turns, scope=scope)
                future = session.worker.ask(message, block=False, timeout=timeout)
            turn: TurnResult = await _bridged(future, timeout)
        except AskTimeout:
            scope.cancel("the submit timed out")
            raise
        finally:
            hosted.pending.discard(scope)
            for arrived in entered:
                arrived()  # (if it never arrived)
        return turn

    async def accept(
        self,
        session_id: str,
        timeout: float = 60.0,
        wait_continuation: bool = True,
        *,
        seq: int | None = None,
    ) -> AcceptResult:
        """Tab: ``Session.accept`` here (the accepted items are stored before the answer:
        the worker writes an insert ahead of answering it).

        Under a cancel scope made here, before the Tab is sent: :meth:`cancel`, the
        deadline, or this call's own cancellation (``ray.cancel``: a cancelled
        ``RemoteSession.aaccept``) calls the accept off wherever it is.
        """
        hosted = self._get(session_id)
        scope = CancelScope()
        entered: list[OnTheWay] = []

        def enter() -> None:
            hosted.pending.add(scope)
            entered.append(hosted.session.input_order.sending())  # later keys wait for it

        try:
            await self._in_turn(hosted, seq, enter, timeout)
            arrived = entered[0]
            message = AcceptSuggestion(
                wait_continuation=wait_continuation, scope=scope, arrived=arrived
            )
            result: AcceptResult = await _bridged(
                hosted.session.controller.ask(message, block=False, timeout=timeout), timeout
            )
        except AskTimeout:
            scope.cancel(GAVE_UP)
            raise
        except asyncio.CancelledError:
            scope.cancel("the accept was cancelled")
            raise
        finally:
            hosted.pending.discard(scope)
            for arrived in entered:
                arrived()  # (if it never arrived)
        return result

    async def keystroke(
        self, session_id: str, text: str = "", at: float | None = None, *, seq: int | None = None
    ) -> None:
        """The user typed: ``Session.keystroke`` here -- on the control lane, after a submit
        or Tab sent before it (``at``: the caller's ``time.monotonic()``, when the caller is
        on this machine, so abort latency counts the trip here). Returns at once, even when
        the key waits for an earlier input (``seq``) still on its way here."""
        hosted = self._get(session_id)
        session = hosted.session
        if seq is None:
            session.keystroke(text, _at=at)
        elif not hosted.inputs.arrive(
            seq, lambda _late: session.keystroke(text, _at=at), time.monotonic()
        ):
            self._expire_later(hosted)

    async def set_approval_mode(self, session_id: str, mode: ApprovalMode) -> None:
        """``Session.set_approval_mode`` here (never waits)."""
        self._get(session_id).session.set_approval_mode(mode)

    async def set_model(
        self, session_id: str, payload: bytes, model_name: str = "", timeout: float = 30.0
    ) -> None:
        """``Session.set_model`` here (between turns only), the model shipped by value
        (:mod:`fore.distributed.shipping`); the shard's copy is closed with the session,
        as the ones it was opened with."""
        hosted = self._get(session_id)
        model = shipping.loads(payload)
        await asyncio.to_thread(
            hosted.session.set_model, model, model_name=model_name, timeout=timeout
        )
        hosted.models = (*hosted.models, model)

    async def cancel(
        self, session_id: str, reason: str = "cancelled by user", *, seq: int | None = None
    ) -> None:
        """Cancel the running run, or the submits and Tabs of this shard still waiting for
        their answer (their scopes: wherever each is, on its way, waiting or running) -- those
        the user gave before the cancel (``seq``), once they have entered."""
        hosted = self._get(session_id)

        def cancel(_late: bool) -> None:
            pending = list(hosted.pending)
            if not pending:
                hosted.session.worker.tell(CancelRun(reason=reason))
                return
            for scope in pending:
                scope.cancel(reason)

        if seq is None:
            cancel(False)
        elif not hosted.inputs.arrive(seq, cancel, time.monotonic()):
            self._expire_later(hosted)

    async def withdraw(self, session_id: str, seq: int) -> None:
        """Input ``seq`` will never start here: its caller cancelled its call
        (``ray.cancel``), which may then never arrive. The inputs numbered after it go
        on at once instead of waiting ``HOLD_S`` for it; one that had started stays
        started, and should the cancelled call be running, its cancel ends it."""
        hosted = self._hosted.get(session_id)
        if hosted is not None:
            hosted.inputs.withdraw(seq)

    async def _in_turn(
        self, hosted: _Hosted, seq: int | None, enter: Callable[[], None], timeout: float
    ) -> None:
        """``enter()`` once input ``seq`` is next (at once if it is, or has no number);
        waits at most ``timeout``, then the input never enters (``AskTimeout``). Withdrawn
        by its caller while it waits (:meth:`withdraw`), it never enters either:
        ``InputWithdrawn``, at once."""
        if seq is None:
            enter()
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def start(late: bool) -> None:
            enter()
            if late:  # from another call, maybe on the other event loop
                loop.call_soon_threadsafe(_wake, waiter)

        def refuse(error: InputWithdrawn) -> None:  # maybe from the other event loop
            loop.call_soon_threadsafe(_wake, waiter, error)

        if hosted.inputs.arrive(seq, start, time.monotonic(), refuse):
            return
        self._expire_later(hosted)
        try:
            await asyncio.wait_for(waiter, timeout)
        except BaseException as exc:
            # cancelled (``ray.cancel``) or out of time while held: it never enters (if it
            # did meanwhile, the caller's ``finally`` undoes it)
            hosted.inputs.withdraw(seq)
            if isinstance(exc, TimeoutError):
                raise AskTimeout("the input waited too long for the ones before it") from None
            raise

    def _expire_later(self, hosted: _Hosted) -> None:
        """Let inputs held behind a missing one go once they have waited ``hold_s``."""
        asyncio.get_running_loop().call_later(hosted.inputs.hold_s + 0.01, self._expire, hosted)

    def _expire(self, hosted: _Hosted) -> None:
        given_up = hosted.inputs.expire(time.monotonic())
        if given_up:
            log.warning(
                "shard_inputs_given_up",
                shard=self.index,
                session=hosted.spec.session_id,
                numbers=given_up,
                next=hosted.inputs.next,
            )

    async def ask(self, session_id: str, target: str, message: Any, timeout: float = 60.0) -> Any:
        """Any message to the session's ``target`` (:data:`TARGETS`), answered as in one process."""
        hosted = self._get(session_id)
        _refuse_local_only(message)
        return await _bridged(
            hosted.target(target).ask(message, block=False, timeout=timeout), timeout
        )

    async def fork(self, session_id: str) -> tuple[str, ShardInfo]:
        """``Session.fork()`` here: a new session (its id returned) on a copy of the stored
        history, opened the same way, hosted on this shard next to its source.

        The copy is the store's (every reported turn) and the fork is stored and
        leased here too, so it moves like any session if this shard dies. It
        shares its source's model objects (``Runtime`` opens it with them): they
        are closed when the last of the sessions using them closes.
        """
        if self._closed:
            raise ForeError(f"shard #{self.index} is shutting down")
        hosted = self._get(session_id)
        forked = await asyncio.to_thread(hosted.session.fork)
        spec = dataclasses.replace(hosted.spec, session_id=forked.id)
        try:
            copy = await self._attach(spec, forked)
        except BaseException:
            await asyncio.to_thread(forked.close)  # its lease goes with it
            raise
        copy.models = hosted.models
        self._hosted[forked.id] = copy
        log.info("shard_session_forked", shard=self.index, session=session_id, fork=forked.id)
        return forked.id, self._info

    async def tell(self, session_id: str, target: str, message: Any) -> None:
        """Any message to the session's ``target``, without an answer."""
        hosted = self._get(session_id)
        _refuse_local_only(message)
        hosted.target(target).tell(message)

    async def events(
        self, session_id: str, kinds: Collection[str] | None = None
    ) -> AsyncIterator[list[Any]]:
        """The session's events in order, a batch at a time (a Ray streaming generator).

        Ends when the session closes here or a newer reader of the same session
        starts; ``kinds`` keeps only events of those class names.
        """
        hosted = self._get(session_id)
        async for batch in hosted.sink.batches(kinds):
            yield batch

    # -- closing ----------------------------------------------------------------------------

    async def close_session(self, session_id: str, timeout: float = 30.0) -> bool:
        """Close the session; its lease goes once its last append is done (the runtime's
        close). False: overlays were left."""
        hosted = self._hosted.pop(session_id, None)
        if hosted is None:
            return True
        session = hosted.session
        with contextlib.suppress(Exception):
            session.controller.tell(AbortSpeculation(reason="session closed"))
        clean = await asyncio.to_thread(session.close, timeout)
        in_use = {id(m) for other in self._hosted.values() for m in other.models}
        _close_models(tuple(m for m in hosted.models if id(m) not in in_use))
        hosted.sink.close()
        return clean

    async def shutdown(
        self, timeout: float = 60.0, ray_ports: tuple[int, ...] = ()
    ) -> dict[str, int]:
        """Close every session, the runtime and the store; what was left behind, counted here.

        The counters are the load benchmark's leak counters, measured in this
        process: overlays of sessions still on disk after their close, overlay
        directories after the runtime's close, threads and file descriptors
        this shard started and did not end, live actors, an unclean close.
        ``ray_ports``: the caller's Ray servers; Ray's core worker here opens
        connections to them lazily (a streaming generator reports its items to
        the caller's worker that way), and those are Ray's, not the runtime's.
        """
        if self._closed:
            return {}
        deadline = time.monotonic() + timeout
        session_overlays = 0
        for session_id in list(self._hosted):
            left_before = self._hosted[session_id].session
            clean = await self.close_session(
                session_id, timeout=max(1.0, (deadline - time.monotonic()) / 2)
            )
            outstanding = len(self.runtime.overlays.outstanding(left_before.id))
            session_overlays += outstanding if outstanding or clean else 1
        self._closed = True
        clean = await asyncio.to_thread(self.runtime.close, max(1.0, deadline - time.monotonic()))
        with contextlib.suppress(StoreError):  # its leases expire on their own
            await asyncio.to_thread(self.store.close)
        overlay_dirs = count_overlay_dirs(self.runtime)
        threads, fds = self._baseline.count(frozenset(ray_ports))
        return {
            "session_overlays": session_overlays,
            "overlay_dirs": overlay_dirs,
            "threads": threads,
            "file_descriptors": fds,
            "live_actors": len(self.runtime.system.registry),
            "unclean_shutdown": 0 if clean else 1,
        }


def _close_models(models: tuple[Any, ...]) -> None:
    """The shard's copies of a closed session's models let their threads go (``close()``)."""
    for model in models:
        close = getattr(model, "close", None)
        if model is not None and callable(close):
            try:
                close()
            except Exception as exc:  # a model's cleanup must not break a close
                log.warning("model_close_failed", model=repr(model), error=repr(exc))


def _refuse_local_only(message: Any) -> None:
    if isinstance(message, Subscribe | Unsubscribe | SubscribeAlerts | UnsubscribeAlerts):
        raise TypeError(
            f"{type(message).__name__} names an address in the caller's process; read a "
            "remote session's events with session.events() / stream() / forward_events()"
        )
