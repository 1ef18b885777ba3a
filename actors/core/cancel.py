"""Cancel scopes: one cancellation per unit of work, however far the work has travelled.

A :class:`CancelScope` is created *before* the work starts, by whoever starts
it (``Session.submit`` for a run, sent as ``Submit.scope``; the speculation
controller for a suggestion request -- every ``LlmRequest`` makes its own when
its sender gives none) and travels with every request the work makes: the LLM
request, the tool batch (each call gets a :meth:`child`), the blob store
request. Whoever cancels calls :meth:`CancelScope.cancel` once; every consumer
that registered :meth:`~CancelScope.on_cancel` is told at once, and a consumer
that only receives the scope later sees ``cancel_called`` when it starts. So a
cancel that overtakes the work it cancels needs no table of "early cancels"
anywhere: the scope *is* the record (the worker and the LLM loop keep none).

Messages carry scopes and ``LlmRequest`` makes one by default, so this module
is in the messages layer (``tests/project/test_layers.py``): it imports nothing
of the actor runtime, only :mod:`fore.errors` and the logger.

The design follows trio's ``CancelScope`` (a scope exists before the work is
bound to it, python-trio/trio#607; ``cancel_called``) and autogen-core's
``CancellationToken`` (a callback added after the cancel fires at once). It
differs from autogen in one point that matters for actors: **callbacks run
outside the scope's lock**, on the thread that called ``cancel`` (or
``on_cancel``, for a scope already cancelled). A callback may therefore call
back into the scope (register, lease, cancel a child) without deadlocking; it
must not block -- it runs on whatever thread cancelled, often a dispatcher
thread -- so it only posts (``tell``, ``post_urgent``,
``call_soon_threadsafe``).

**Leases and settlement.** Work that started under a scope takes a
:meth:`~CancelScope.lease` of its kind (``"llm"``, ``"tools"``, ``"blob"``)
and releases it when it has really stopped (the HTTP stream closed, the last
tool call reported). :meth:`~CancelScope.on_settled` fires once the scope is
over -- cancelled, or closed because the work completed -- *and* every lease
is released: that is the moment a speculation's overlay may be removed, with
no stream or process left that could still write through it. A lease taken
on a child counts for its ancestors too. To avoid a race between "is it
cancelled?" and "I started", a consumer takes the lease first and then checks
``cancel_called``; if it is set it releases the lease and answers "cancelled"
without starting.

**Lifetime.** A scope whose work completed without a cancel is :meth:`closed
<CancelScope.close>`: its ``on_cancel`` callbacks are dropped (they can never
be needed) and its ``on_settled`` callbacks run once the last lease is
released. Callbacks are typically bound methods of the actors that hold the
scope, so a scope that kept them would be a reference cycle left to the
cyclic collector, whose pauses stop every thread (see
``tests/core/test_reference_cycles.py``); every callback is dropped as soon as it
has run or can no longer run. A parent refers to its children only weakly,
so a child never keeps a cycle alive either.

The tool-facing API of :class:`~actors.tools.cancel.CancelToken`
(``cancelled``, ``raise_if_cancelled``, ``on_cancel``, ``wait``, ``reason``)
is kept, so that a tool call's token can be a child scope of its run.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Final, Literal, TypeVar, get_args

from fore.actors.core.logs import get_logger
from fore.errors import Cancelled

__all__ = [
    "KINDS",
    "CancelScope",
    "Cancelled",
    "Lease",
    "LeaseKind",
    "Registration",
    "unless_cancelled",
]

log = get_logger(__name__)
T = TypeVar("T")

LeaseKind = Literal["llm", "tools", "blob"]
"""The kinds of work a scope tracks: an LLM request, a tool batch, a blob store request."""

KINDS: Final[tuple[LeaseKind, ...]] = get_args(LeaseKind)

_keys = itertools.count()
"""Registration keys; ``next()`` on a count is atomic under the GIL."""


class Registration:
    """A callback registered with :meth:`CancelScope.on_cancel`; :meth:`remove` takes it back.

    The scope keeps the callback under an integer key, never this object, so
    a registration held by the callback's owner makes no reference cycle.
    """

    __slots__ = ("_key", "_scope")

    def __init__(self, scope: CancelScope | None, key: int) -> None:
        self._scope = scope
        self._key = key

    def remove(self) -> bool:
        """Unregister; True if the callback was still pending (it will never run now)."""
        scope, self._scope = self._scope, None
        if scope is None:
            return False
        return scope._remove(self._key)


_DONE = Registration(None, -1)
"""What ``on_cancel`` returns when the callback already ran (or never will)."""


class Lease:
    """Work of one kind running under a scope; :meth:`release` when it has stopped.

    Releasing twice is harmless (the second call does nothing), so a consumer
    can release from every path that ends the work. Also a context manager.
    """

    __slots__ = ("_scope", "kind")

    def __init__(self, scope: CancelScope, kind: LeaseKind) -> None:
        self._scope: CancelScope | None = scope
        self.kind: Final = kind

    @property
    def released(self) -> bool:
        return self._scope is None

    def release(self) -> bool:
        """Release the lease; True the first time."""
        scope, self._scope = self._scope, None
        if scope is None:
            return False
        scope._release(self.kind)
        return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class _ChildLink:
    """The parent's ``on_cancel`` callback of one child; holds the child weakly."""

    __slots__ = ("_child",)

    def __init__(self, child: CancelScope) -> None:
        self._child = weakref.ref(child)

    def __call__(self, reason: str) -> None:
        child = self._child()
        if child is not None:
            child.cancel(reason)


class CancelScope:
    """A one-way cancellation of one unit of work, with leases and settlement.

    Thread-safe: ``cancel``, ``on_cancel``, ``child``, ``lease`` and
    ``release`` may race from any threads. Every callback runs at most once
    and never under the scope's lock.
    """

    __slots__ = (
        "__weakref__",
        "_cancel_callbacks",
        "_cancelled_at",
        "_closed_at",
        "_event",
        "_held",
        "_last_release",
        "_lock",
        "_parent",
        "_parent_registration",
        "_reason",
        "_settled_at",
        "_settled_callbacks",
        "_settled_times",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._cancelled_at: float | None = None
        self._closed_at: float | None = None
        self._cancel_callbacks: dict[int, Callable[[str], object]] | None = None
        self._settled_callbacks: list[Callable[[Mapping[str, float]], object]] | None = None
        self._event: threading.Event | None = None  # created by the first wait()
        self._held: dict[LeaseKind, int] | None = None  # outstanding leases, this subtree
        self._last_release: dict[LeaseKind, float] | None = None
        self._settled_at: float | None = None
        self._settled_times: Mapping[str, float] | None = None
        self._parent: CancelScope | None = None
        self._parent_registration: Registration | None = None

    # -- state ----------------------------------------------------------------

    def _cancelled_scope(self) -> CancelScope | None:
        """This scope if cancelled, else the nearest cancelled ancestor.

        A parent's cancel reaches its children through a callback, a moment
        later; asking the ancestors closes that gap, so a consumer that took
        a lease and then finds ``cancel_called`` False knows that no ancestor
        had settled without counting its lease.
        """
        scope: CancelScope | None = self
        while scope is not None:
            if scope._cancelled_at is not None:
                return scope
            scope = scope._parent
        return None

    @property
    def cancel_called(self) -> bool:
        """Whether this scope or an ancestor has been cancelled."""
        return self._cancelled_scope() is not None

    @property
    def cancelled(self) -> bool:
        """The same as :attr:`cancel_called` (the ``CancelToken`` spelling tools use)."""
        return self._cancelled_scope() is not None

    @property
    def reason(self) -> str | None:
        """Why it was cancelled; ``None`` until then."""
        scope = self._cancelled_scope()
        return None if scope is None else scope._reason

    @property
    def cancelled_at(self) -> float | None:
        """``time.monotonic()`` of the cancel; ``None`` until then."""
        scope = self._cancelled_scope()
        return None if scope is None else scope._cancelled_at

    @property
    def settled(self) -> bool:
        """Whether the scope is over (cancelled or closed) and every lease released."""
        return self._settled_at is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the work completed)."""
        return self._closed_at is not None

    def leases(self) -> Mapping[str, int]:
        """Outstanding leases per kind (this scope and its children); for tests and stats."""
        with self._lock:
            return {kind: count for kind, count in (self._held or {}).items() if count}

    def __repr__(self) -> str:
        if self._cancelled_at is not None:
            state = f"cancelled {self._reason!r}"
        else:
            state = "closed" if self._closed_at is not None else "open"
        return f"<CancelScope {state} leases={self.leases()}>"

    # -- cancelling -------------------------------------------------------------

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel, once; False if it already was.

        The ``on_cancel`` callbacks then run here, on the caller's thread,
        outside the lock, each once; a callback that raises is logged and
        the others still run. Children are cancelled with the same reason.
        A closed scope still records the cancel (``cancel_called``, waiters
        wake) but has no callbacks left to run.
        """
        with self._lock:
            if self._cancelled_at is not None:
                return False
            self._reason = reason
            self._cancelled_at = time.monotonic()
            callbacks = self._cancel_callbacks
            self._cancel_callbacks = None
            event = self._event
            parent_registration = self._parent_registration
            self._parent_registration = None
            settled = self._settle_locked()
        if event is not None:
            event.set()
        if parent_registration is not None:  # the parent need not tell us any more
            parent_registration.remove()
        if callbacks:
            for callback in callbacks.values():
                _run(callback, reason)
        if settled is not None:
            _fire_settled(*settled)
        return True

    def on_cancel(self, callback: Callable[[str], object]) -> Registration:
        """Run ``callback(reason)`` when cancelled; at once (here) if it already is.

        "Already" includes an ancestor's cancel that is still on its way to
        this scope, so ``cancel_called`` true means the callback runs now.
        Returns a :class:`Registration` whose ``remove()`` takes the callback
        back -- do that when the work ends without a cancel, so the scope
        stops referring to it. On a closed scope that was never cancelled
        the callback is not kept (it could never run).
        """
        with self._lock:
            reason = self._reason
            if reason is None:
                # An ancestor's cancel may not have reached this scope yet:
                # it counts as cancelled already, so the callback runs now.
                cancelled = self._cancelled_scope()
                if cancelled is not None:
                    reason = cancelled._reason
                elif self._closed_at is not None:
                    return _DONE
                else:
                    key = next(_keys)
                    if self._cancel_callbacks is None:
                        self._cancel_callbacks = {}
                    self._cancel_callbacks[key] = callback
                    return Registration(self, key)
        assert reason is not None
        _run(callback, reason)
        return _DONE

    def _remove(self, key: int) -> bool:
        with self._lock:
            callbacks = self._cancel_callbacks
            if callbacks is None:
                return False
            return callbacks.pop(key, None) is not None

    def child(self) -> CancelScope:
        """A scope cancelled with this one (e.g. one tool call of a batch).

        The child can also be cancelled on its own; that does not cancel this
        scope. A lease taken on the child counts for this scope's settlement
        too. This scope holds the child only weakly.
        """
        child = CancelScope()
        child._parent = self
        registration = self.on_cancel(_ChildLink(child))
        if registration is not _DONE:
            with child._lock:
                if child._cancelled_at is None:
                    child._parent_registration = registration
                    registration = _DONE
            registration.remove()  # no-op unless the parent's cancel got here first
        return child

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` (with the reason) if the scope is cancelled."""
        scope = self._cancelled_scope()
        if scope is not None:
            raise Cancelled(scope._reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for the cancel; True when cancelled.

        For tools on worker threads only: never on a dispatcher thread.
        """
        if self._cancelled_scope() is not None:
            return True
        with self._lock:
            if self._cancelled_at is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    # -- leases and settlement --------------------------------------------------------

    def lease(self, kind: LeaseKind) -> Lease:
        """Record that work of ``kind`` started under this scope.

        Take it *before* checking :attr:`cancel_called`, and release it when
        the work has stopped: :meth:`on_settled` waits for every lease.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown lease kind {kind!r} (one of {', '.join(KINDS)})")
        scope: CancelScope | None = self
        while scope is not None:
            with scope._lock:
                held = scope._held
                if held is None:
                    held = scope._held = {}
                held[kind] = held.get(kind, 0) + 1
            scope = scope._parent
        return Lease(self, kind)

    def _release(self, kind: LeaseKind) -> None:
        now = time.monotonic()
        scope: CancelScope | None = self
        while scope is not None:
            with scope._lock:
                held = scope._held
                assert held is not None and held.get(kind, 0) > 0, "lease released twice"
                held[kind] -= 1
                if scope._last_release is None:
                    scope._last_release = {}
                scope._last_release[kind] = now
                settled = scope._settle_locked()
            if settled is not None:
                _fire_settled(*settled)
            scope = scope._parent

    def on_settled(self, callback: Callable[[Mapping[str, float]], object]) -> None:
        """Run ``callback(times)`` once the scope is over and every lease released.

        Over means cancelled, or closed (the work completed). ``times`` maps
        each kind in :data:`KINDS` to the ``time.monotonic()`` at which that
        kind was done: the last release of its leases, or the cancel (close)
        if they were all released before it; a kind that never took a lease
        counts as done at the moment of settlement, so every kind has a time.
        Runs at once (here) if the scope has already settled, else on the
        thread that cancels, closes or releases the last lease.
        """
        with self._lock:
            times = self._settled_times
            if times is None:
                if self._settled_callbacks is None:
                    self._settled_callbacks = []
                self._settled_callbacks.append(callback)
                return
        _run(callback, times)

    def _settle_locked(
        self,
    ) -> tuple[list[Callable[[Mapping[str, float]], object]], Mapping[str, float]] | None:
        """Under the lock: settle now if due; the callbacks to run outside it."""
        over = self._cancelled_at if self._cancelled_at is not None else self._closed_at
        if over is None or self._settled_at is not None:
            return None
        held = self._held
        if held and any(held.values()):
            return None
        now = time.monotonic()
        last = self._last_release or {}
        done: dict[str, float] = {
            kind: max(over, last[kind]) if kind in last else now for kind in KINDS
        }
        times = MappingProxyType(done)
        self._settled_at = now
        self._settled_times = times
        callbacks = self._settled_callbacks
        self._settled_callbacks = None
        if not callbacks:
            return None
        return callbacks, times

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """The work completed: drop the ``on_cancel`` callbacks, and settle.

        Nothing refers back to the callbacks' owners afterwards (the
        ``on_settled`` callbacks run now, or when the last lease is released,
        and are dropped then). Idempotent. A later :meth:`cancel` is still
        recorded (``cancel_called``, waiters wake) but has nothing to run.
        """
        with self._lock:
            if self._closed_at is None:
                self._closed_at = time.monotonic()
            self._cancel_callbacks = None
            parent_registration = self._parent_registration
            self._parent_registration = None
            settled = self._settle_locked()
        if parent_registration is not None:
            parent_registration.remove()
        if settled is not None:
            _fire_settled(*settled)


def unless_cancelled(scope: CancelScope | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, unless ``scope`` is already cancelled (then :class:`Cancelled`).

    The guard of work queued under a scope, checked when the work starts (on
    the thread that runs it): a job called off while it waited never runs.
    """
    if scope is not None:
        scope.raise_if_cancelled()
    return fn(*args)


def _run(callback: Callable[[T], object], arg: T) -> None:
    """Run one callback; an exception is logged, never passed on to the canceller."""
    try:
        callback(arg)
    except Exception:
        log.exception("cancel_callback_failed", callback=repr(callback))


def _fire_settled(
    callbacks: list[Callable[[Mapping[str, float]], object]], times: Mapping[str, float]
) -> None:
    for callback in callbacks:
        _run(callback, times)
