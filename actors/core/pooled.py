"""Pooled actors: pykka's API, a shared dispatcher instead of a thread each.

:class:`PooledActor` is a :class:`pykka.Actor` subclass built through pykka's
extension points (``_create_actor_inbox``, ``_create_future``,
``_start_actor_loop``). ``tell``, ``ask``, proxies, ``stop`` and the
``on_start``/``on_stop``/``on_failure`` hooks behave as pykka documents, with
these differences, each fixing a problem of one-thread-per-actor:

* actors share the dispatcher's few threads (see :mod:`actors.core.dispatcher`);
* :class:`~messages.base.ControlMessage` mail overtakes ordinary mail, and
  :class:`~messages.runtime.StopNow` stops an actor without waiting behind
  its queue;
* every ask is answered: with the value, the handler's exception,
  :class:`~fore.errors.ActorStopped` (a ``pykka.ActorDeadError``), or
  :class:`~actors.core.errors.AskTimeout` at its deadline (``default_ask_timeout``,
  60 s unless a class overrides it; ``None``, pykka's wait-forever, is refused
  when the class is defined). A
  reply taken over with :meth:`PooledActor.defer_reply` and still owed when
  the actor exits is answered then: :class:`~actors.core.errors.ActorCrashed`
  if it failed, :class:`~fore.errors.ActorStopped` (a ``pykka.ActorDeadError``)
  if it stopped or was killed;
* a ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``) raised by a
  handler fails that actor only -- pykka stops every actor in the process;
* exits are observable (:meth:`PooledActor.add_exit_watcher`), which is what
  the supervisor builds on; pykka only has the local ``on_failure`` hook;
* actors register in their system's O(1) :class:`~actors.core.registry.Registry`
  (lookups by URN, name and session) *and* in :class:`pykka.ActorRegistry`,
  so pykka's usual shutdown (``ActorRegistry.stop_all()``), lookups and
  broadcasts see them too;
* an ask with a message nobody handles is answered ``None`` and logged, as
  pykka does, unless the class sets ``strict_messages = True``: then the
  asker gets :class:`UnhandledMessageError`.

A plain ``PooledActor`` logs as pykka does: on the ``pykka`` logger, in
pykka's own words ("Unhandled exception in …:", "Exception returned from …
to caller:", "Unexpected message received by …"), so code written against
pykka keeps its log handling. Fore's own actors derive from
:class:`ForeActor`: strict about messages, and each failure logged once, as
a Fore event (``actor_failed``, ``unhandled_message``) on the ``fore.actor``
logger with the actor's class, id and session.

Handlers must not block: :meth:`PooledActor.run_blocking` runs blocking work
on the blocking lane and delivers the result back as a message,
:meth:`PooledActor.ask_then` asks another actor without waiting, and
:meth:`PooledActor.send_after` / :meth:`PooledActor.call_after` use the
runtime's single timer thread. A blocking ``get()`` of a pending future on a
dispatcher thread raises :class:`~actors.core.errors.BlockingOnDispatcherError`.

Layout: this module is the actor itself -- pykka's extension points, the
message loop, failures and exits. What a handler uses to wait without
blocking (posts, the blocking lane, asks, timers) is the
:class:`~actors.core.continuations.Continuations` mixin; ``@handles`` and the
dispatch table are :mod:`actors.core.handlers`.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pykka
from pykka import ActorDeadError, ActorRef, ActorRegistry
from pykka._envelope import Envelope
from pykka.messages import _ActorStop

from fore.actors.core.continuations import Continuations, _Call, _UrgentCall
from fore.actors.core.errors import ActorCrashed, ActorStopped
from fore.actors.core.future import PooledFuture, check_ask_timeout
from fore.actors.core.handlers import TypedDispatch
from fore.actors.core.logs import get_logger
from fore.actors.core.mailbox import Mailbox
from fore.actors.core.ref import PooledRef
from fore.actors.core.system import ActorSystem, current_system
from fore.messages.runtime import StopNow

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "ActorExit",
    "ExitWatcher",
    "ForeActor",
    "PooledActor",
    "stop_now",
    "stop_now_all",
]

_log = get_logger(__name__)
_pykka_log = logging.getLogger("pykka")
"""pykka's logger: failures are reported there, in pykka's words."""

_pykka_handle_receive = pykka.Actor._handle_receive

_EXIT_LOCK = threading.Lock()
"""Guards the exit/watch handshake of every actor (both are rare events)."""

_EVENT_LOCK = threading.Lock()


class _StopFlag:
    """A lighter ``threading.Event`` for ``actor_stopped``.

    pykka only calls ``is_set()`` and ``set()``; an Event (a Condition and a
    Lock) per actor is most of an idle actor's memory. ``wait()`` creates the
    real Event on demand.
    """

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._flag = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if self._flag:
            event.set()
        return event.wait(timeout)


class _Start:
    """The first envelope of every actor: runs ``on_start`` on the dispatcher."""

    __slots__ = ()


_START = _Start()


@dataclass(slots=True)
class ActorExit:
    """What an exit watcher is told when an actor stops, fails or is killed."""

    ref: ActorRef[Any]
    failed: bool
    error: BaseException | None = None
    killed: bool = False
    leftovers: list[Envelope[Any]] = field(default_factory=list)
    claimed: bool = False

    def claim_leftovers(self) -> list[Envelope[Any]]:
        """Take over the mail that was still queued (at most one watcher can)."""
        if self.claimed:
            return []
        self.claimed = True
        return self.leftovers


ExitWatcher = Callable[[ActorExit], None]


class PooledActor(TypedDispatch, Continuations, pykka.Actor):
    """A pykka actor run by the shared dispatcher instead of its own thread."""

    default_ask_timeout: ClassVar[float] = 60.0
    """Deadline (seconds) of asks to this actor; must be a finite number > 0.

    ``None`` (pykka's wait-forever) is rejected when the subclass is defined:
    the runtime promises that every ask is answered by its deadline.
    """

    session_id: str | None = None
    """The session this actor belongs to (registry index, log context)."""

    registry_name: str | None = None
    """A unique name to register under, for process-wide singletons."""

    pykka_logging: ClassVar[bool] = True
    """Log failures on the ``pykka`` logger in pykka's words (else as Fore events)."""

    actor_inbox: Mailbox

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_ask_timeout(cls.default_ask_timeout, f"{cls.__qualname__}.default_ask_timeout")

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # pykka.Actor.__init__, minus the per-actor threading.Event.
        self.actor_urn = uuid.uuid4().urn
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = _StopFlag()  # type: ignore[assignment]
        self._actor_ref = PooledRef(self)
        self._fore_system: ActorSystem = current_system()
        self.actor_inbox.bind(self, self._fore_system.dispatcher)
        self._fore_current: Envelope[Any] | None = None
        self._fore_exited = False
        self._fore_watchers: list[ExitWatcher] | None = None
        self._fore_deferred: set[PooledFuture[Any]] | None = None
        self._fore_log: Any = None

    # -- pykka extension points ---------------------------------------------

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> ActorRef[Self]:
        obj = cls(*args, **kwargs)
        assert isinstance(obj.actor_inbox, Mailbox), "PooledActor.__init__() was not called"
        obj._fore_system.registry.register(
            obj.actor_ref, name=obj.registry_name, session=obj.session_id
        )
        # Visible to pykka too (before on_start, as pykka registers): its
        # registry's lookups are linear scans, so Fore's own code uses the
        # system's O(1) index; this is for code written against pykka.
        ActorRegistry.register(obj.actor_ref)
        obj._start_actor_loop()
        return obj.actor_ref

    @staticmethod
    def _create_actor_inbox() -> Mailbox:
        return Mailbox()

    @classmethod
    def _create_future(cls) -> PooledFuture[Any]:
        return PooledFuture(time.monotonic() + cls.default_ask_timeout)

    def _start_actor_loop(self) -> None:
        self.actor_inbox.put_first(Envelope(_START))

    # -- conveniences -------------------------------------------------------

    @property
    def system(self) -> ActorSystem:
        """The actor system this actor runs in."""
        return self._fore_system

    @property
    def log(self) -> Any:
        """A structlog logger bound to this actor's class, id and session."""
        if self._fore_log is None:
            self._fore_log = get_logger("fore.actor").bind(
                actor=type(self).__name__,
                actor_id=self.actor_urn[-12:],
                session=self.session_id,
            )
        return self._fore_log

    def defer_reply(self) -> PooledFuture[Any] | None:
        """Take over answering the current ask; returns its future (``None`` for a tell).

        The handler's return value is then ignored: the actor answers later
        (e.g. when a turn ends) with ``future.try_set(...)``. The future keeps
        its deadline, so a reply that never comes still resolves the ask, and
        one still owed when this actor exits (crash, stop, kill) is answered
        at once with :class:`ActorCrashed` or :class:`ActorStopped` -- so
        answer with ``try_set``/``try_set_exception``, which tolerate that.
        """
        envelope = self._fore_current
        if envelope is None or envelope.reply_to is None:
            return None
        future = envelope.reply_to
        envelope.reply_to = None
        assert isinstance(future, PooledFuture)
        owed = self._fore_deferred
        if owed is None:
            owed = self._fore_deferred = set()
        owed.add(future)
        future.add_done_callback(owed.discard)
        if self._fore_exited:  # killed from another thread meanwhile: the exit missed it
            self._fore_settle_deferred(failed=False)
        return future

    def release_reply(self, future: PooledFuture[Any]) -> bool:
        """Hand a reply taken with :meth:`defer_reply` to someone who outlives this actor.

        Its exit then no longer answers it with :class:`ActorCrashed` or
        :class:`ActorStopped`: the caller now owes the answer (the future
        keeps its deadline, so the asker still never waits forever). For work
        that goes on after this actor stops and whose outcome is the true
        answer. Returns False, releasing nothing, when it is not owed here (not
        deferred by this actor, or answered already).

        Call it on this actor's own thread -- a handler, ``on_stop`` or
        ``on_failure``, which run before the exit answers what is owed -- never
        from another thread, where the exit may be answering it at that moment.
        """
        owed = self._fore_deferred
        if owed is None or future not in owed:
            return False
        owed.discard(future)
        return not future.done()

    # -- exits and supervision ----------------------------------------------

    @property
    def has_exited(self) -> bool:
        """Whether this actor has fully exited: hooks done, mailbox closed, watchers told.

        Unlike ``actor_ref.is_alive()``, which turns False as soon as the actor
        *begins* to stop or fail (before ``on_stop``/``on_failure`` run).
        """
        return self._fore_exited

    def add_exit_watcher(self, watcher: ExitWatcher) -> bool:
        """Call ``watcher(exit)`` once when this actor exits.

        Returns False (and registers nothing) when the actor has already
        exited; the caller then knows the exit happened before it watched.
        """
        with _EXIT_LOCK:
            if self._fore_exited:
                return False
            if self._fore_watchers is None:
                self._fore_watchers = []
            self._fore_watchers.append(watcher)
            return True

    def kill(self) -> None:
        """Stop at once from any thread, without ``on_stop``; used for stuck actors.

        A handler that is running keeps running on its thread, but the actor
        is dead: its mailbox is closed, every queued ask is answered with
        :class:`ActorStopped` and watchers are told (``killed=True``).
        """
        self._fore_unregister()
        self.actor_stopped.set()
        self._fore_exit(failed=False, error=None, killed=True)

    def _fore_unregister(self) -> None:
        self._fore_system.registry.unregister(self.actor_ref)
        ActorRegistry.unregister(self.actor_ref)

    def _fore_exit(
        self, *, failed: bool, error: BaseException | None, killed: bool = False
    ) -> None:
        with _EXIT_LOCK:
            if self._fore_exited:
                return
            self._fore_exited = True
            watchers, self._fore_watchers = self._fore_watchers, None
        leftovers = self.actor_inbox.close()
        self._fore_settle_deferred(failed=failed)
        record = ActorExit(self.actor_ref, failed, error, killed, leftovers)
        for watcher in watchers or ():
            try:
                watcher(record)
            except BaseException:  # a watcher must not cut the exit short (see below)
                self.log.exception("exit_watcher_failed")
        if not record.claimed:
            _answer_dead(record.leftovers, self)

    def _fore_settle_deferred(self, *, failed: bool) -> None:
        """Answer every deferred reply still owed: this actor will never answer it."""
        owed = self._fore_deferred
        if not owed:
            return
        for future in owed.copy():  # set.copy is atomic; done-callbacks discard meanwhile
            if failed:
                error: BaseException = ActorCrashed(f"{self} failed before answering")
            else:
                error = ActorStopped(f"{self} stopped before answering")
            try:
                future.try_set_exception(error)
            except BaseException:  # one odd future must not leave the others unanswered
                _log.exception("answer_deferred_failed", actor=repr(self))

    def _fore_escaped(self, envelope: Envelope[Any], exc: BaseException) -> None:
        """Fail this actor for an exception that escaped :meth:`_fore_process`.

        Called by the mailbox. Handler errors never get here; what does comes
        from delivering an outcome (a reply future whose ``set`` raises, say),
        and the actor must then fail visibly -- supervisor told, queued asks
        answered -- rather than sit wedged with a mailbox nobody runs. Never
        raises: it runs on a dispatcher thread between two slices.
        """
        try:
            if self._fore_exited:
                # Already gone (e.g. it raised while answering a stop): log only.
                self.log.error("actor_exit_raised", error=repr(exc), exc_info=exc)
            else:
                self._fore_fail((type(exc), exc, exc.__traceback__))
            if envelope.reply_to is not None:  # unless already answered
                crash = ActorCrashed(
                    f"{self} failed delivering the outcome of "
                    f"{type(envelope.message).__name__}: {exc!r}"
                )
                crash.__cause__ = exc
                _settle_exception(envelope.reply_to, (ActorCrashed, crash, exc.__traceback__))
        except BaseException:
            try:
                self.log.exception("actor_escape_handling_failed")
            finally:
                # Whatever happened, nothing may keep waiting on this mailbox.
                _answer_dead(self.actor_inbox.close(), self)

    # -- the message loop (called by the mailbox on a dispatcher thread) -----

    def _fore_process(self, envelope: Envelope[Any]) -> None:
        if self._fore_exited:  # killed while this envelope was in flight
            _answer_dead([envelope], self)
            return
        message = envelope.message
        self._fore_current = envelope
        try:
            if message is _START:
                self._fore_run_on_start()
                return
            response = self._handle_receive(message)
        except Exception:
            exc_info = sys.exc_info()
            if envelope.reply_to is not None:
                if self.pykka_logging:
                    _pykka_log.info(
                        "Exception returned from %s to caller:", self, exc_info=exc_info
                    )
                _settle_exception(envelope.reply_to, exc_info)
            else:
                self._fore_fail(exc_info)
            return
        except BaseException as exc:  # SystemExit & co: this actor fails, nobody else
            self._fore_fail(sys.exc_info())
            if envelope.reply_to is not None:
                crash = ActorCrashed(f"{self} crashed handling {type(message).__name__}: {exc!r}")
                crash.__cause__ = exc
                _settle_exception(envelope.reply_to, (ActorCrashed, crash, exc.__traceback__))
            return
        finally:
            self._fore_current = None
        reply_to = envelope.reply_to
        if reply_to is not None:
            try:
                reply_to.set(response)
            except queue.Full:  # the asker's deadline already answered it
                pass

    def _fore_run_on_start(self) -> None:
        try:
            self.on_start()
        except BaseException:
            exc_info = sys.exc_info()
            self._handle_failure(*exc_info)
            self._fore_exit(failed=True, error=exc_info[1])

    def _fore_fail(
        self,
        exc_info: tuple[type[BaseException], BaseException, TracebackType | None]
        | tuple[None, None, None],
    ) -> None:
        try:
            self._handle_failure(*exc_info)
            self.on_failure(*exc_info)
        except BaseException:  # even SystemExit from on_failure must not skip the exit
            self._fore_log_failure(*sys.exc_info())
        finally:
            self._fore_exit(failed=True, error=exc_info[1])

    def _handle_receive(self, message: Any) -> Any:
        kind = type(message)
        if kind is _Call:
            return message.fn(*message.args)
        if kind is StopNow:
            return self._stop()
        if kind is _UrgentCall:
            return message.fn(*message.args)
        # pykka's own handling (its stop, proxy calls, then on_receive), named
        # directly: super() would look through the mixins' dicts on every message.
        return _pykka_handle_receive(self, message)

    def _stop(self) -> None:
        if self._fore_exited:
            return
        self._fore_unregister()
        self.actor_stopped.set()
        try:
            self.on_stop()
        except BaseException:
            self._fore_log_failure(*sys.exc_info())
        finally:
            self._fore_exit(failed=False, error=None)

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._fore_log_failure(exception_type, exception_value, traceback)
        self._fore_unregister()
        self.actor_stopped.set()

    def _fore_log_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Log a failure once: as pykka does, or as Fore's ``actor_failed`` event."""
        exc_info = (exception_type, exception_value, traceback)
        if self.pykka_logging:
            _pykka_log.error("Unhandled exception in %s:", self, exc_info=exc_info)  # type: ignore[arg-type]
        else:
            self.log.error("actor_failed", error=repr(exception_value), exc_info=exc_info)


class ForeActor(PooledActor):
    """The base of Fore's own actors: typed messages, failures logged as Fore events.

    Unlike a plain :class:`PooledActor`, which follows pykka, an ask whose
    message has no handler fails with :class:`UnhandledMessageError` (a typed
    asker must not misread ``None``), and a failure is logged once on the
    ``fore.actor`` logger with the actor's class, id and session -- the
    context an operator of many sessions needs -- rather than in pykka's words.
    """

    pykka_logging = False
    strict_messages = True


def _settle_exception(future: Any, exc_info: Any) -> None:
    try:
        future.set_exception(exc_info)
    except queue.Full:  # the asker's deadline already answered it
        pass


def _answer_dead(envelopes: Iterable[Envelope[Any]], actor: Any) -> None:
    for envelope in envelopes:
        future = envelope.reply_to
        if future is None:
            continue
        try:
            if isinstance(envelope.message, _ActorStop | StopNow):
                future.set(None)
            else:
                error = ActorStopped(f"{actor} stopped before handling the message")
                future.set_exception((ActorStopped, error, None))
        except queue.Full:  # already answered (deadline)
            pass
        except BaseException:  # one odd future must not leave the others unanswered
            _log.exception("answer_dead_failed", actor=repr(actor))


def stop_now(ref: ActorRef[Any], *, block: bool = True, timeout: float | None = None) -> bool:
    """Stop an actor ahead of its queued mail (control lane); True if it was alive."""
    try:
        future = ref.ask(StopNow(), block=False)
    except ActorDeadError:
        return False
    if not block:
        return True
    try:
        future.get(timeout=timeout)
    except ActorDeadError:
        return False
    return True


def stop_now_all(refs: Iterable[ActorRef[Any]], *, deadline: float) -> None:
    """Stop many actors at once; kill those that have not stopped by ``deadline``."""
    pending: list[tuple[ActorRef[Any], Any]] = []
    for ref in refs:
        try:
            pending.append((ref, ref.ask(StopNow(), block=False)))
        except ActorDeadError:
            continue
    for ref, future in pending:
        try:
            future.get(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:
            actor = ref._actor_weakref()
            if isinstance(actor, PooledActor):
                actor.kill()
