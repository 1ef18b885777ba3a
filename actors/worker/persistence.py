"""Write-ahead of a session's history to its session store (issue 25).

A session opened on a runtime with a store (``Runtime(store=...)``) writes its
history to the store as it goes, so that closing the process -- a deploy, a
crash, ``kill -9`` -- loses at most the turn in flight. The rules:

* **An item is durable before its turn is reported.** When a run ends, its
  new items go to the store as one :class:`~actors.store.records.TurnBatch`
  (with the run's token usage, the session's new alerts and the labels of its
  pending actions) on the blocking lane, and only once that append has
  succeeded does the worker send ``TurnFinished`` and answer the submit. A
  run that pauses is saved the same way before its submit is answered ``paused``
  (a pause may wait hours for a person). Items an accepted speculation inserts
  (``InsertItems``) are one append before the insert is answered: its files are
  already applied, so its history must not wait for the next turn.
* **A batch is all or nothing.** The store writes a batch in one transaction,
  so a turn killed mid-write is either wholly in the store or not at all.
  Batches are cut at the store's bound of items per batch
  (:data:`~actors.store.codec.MAX_BATCH_ITEMS`); only a turn larger than that
  is written in several transactions.
* **A failed append is never silent, and loses nothing in memory.** The turn
  is reported with status ``error``, ``error_kind="store"`` and an error that
  says its items were not saved; an ERROR alert says the same. The items stay
  in the session's history and go to the store with the next batch that
  succeeds (the writer keeps a cursor, not a queue of batches).
* **One writer per session.** Appends of a session run one at a time, in the
  order they were asked for; a save asked for while one runs waits for it.
* **A restarted worker reloads from the store.** When its supervisor restarts a
  crashed worker, the new incarnation first waits for an append the old one
  left running, then reads the session back (:meth:`SessionStore.load
  <actors.store.api.SessionStore.load>`; this store holds the lease, so no
  other process has written it). History becomes the stored items, plus the
  items of reported turns whose save had failed (kept in memory, still owed to
  the store); the items of the turn that was in flight are dropped, and an
  alert says how many. Messages that reach the worker while it reloads wait
  and are handled afterwards, in order.

Nothing here touches the database on a dispatcher thread: every store call is
a function run on the blocking lane, its outcome handed back as a message.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from fore.actors.core.cancel import CancelScope
from fore.actors.store import SessionStore, TurnBatch
from fore.actors.store.codec import (
    MAX_BATCH_ALERTS,
    MAX_BATCH_ITEMS,
    MAX_LABEL_CHARS,
    MAX_PENDING_ACTIONS,
)
from fore.messages.alerts import Alert
from fore.messages.conversation import Item
from fore.messages.llm import Usage

__all__ = [
    "AlertTap",
    "Persistence",
    "TurnWriter",
    "add_usage",
    "chunks",
    "merge_reload",
    "pending_labels",
    "store_problem",
]

MAX_TAPPED_ALERTS = 1_000
"""Alerts waiting for a batch (the oldest are dropped past this: a store down for long)."""


def add_usage(a: Usage, b: Usage) -> Usage:
    """The sum of two usages (the store adds a batch's usage to the session's total)."""
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )


def _empty(usage: Usage) -> bool:
    return not (
        usage.prompt_tokens or usage.completion_tokens or usage.total_tokens or usage.cached_tokens
    )


def chunks(items: Sequence[Item], size: int = MAX_BATCH_ITEMS) -> list[tuple[Item, ...]]:
    """``items`` cut into batches of at most ``size`` (one batch, usually; none if empty)."""
    return [tuple(items[i : i + size]) for i in range(0, len(items), size)]


def merge_reload(
    memory: Sequence[Item], stored: Sequence[Item], owed: int
) -> tuple[list[Item], int, int]:
    """History after a restart: ``(history, kept, lost)``.

    ``memory`` is what the crashed incarnation held, ``stored`` what the store
    has, ``owed`` the length of ``memory`` that reported turns cover (the
    items past it belong to the turn that was in flight). When ``memory``
    begins with exactly the stored items, the items of reported turns that are
    not stored yet (a failed save) are kept -- they are the user's work and
    are still owed to the store; otherwise the store is the truth and they are
    dropped too. ``lost`` counts what memory had that the new history does not.
    """
    n = len(stored)
    kept: list[Item] = []
    if len(memory) >= n and list(memory[:n]) == list(stored):
        kept = list(memory[n : max(n, owed)])
    history = [*stored, *kept]
    lost = max(0, len(memory) - len(history))
    return history, len(kept), lost


def pending_labels(actions: Any) -> tuple[str, ...] | None:
    """The labels of a session's pending actions, within the store's bounds (None: unknown)."""
    if actions is None:
        return None
    try:
        pending = actions.pending()
    except Exception:  # a session's own bookkeeping must never fail a save
        return None
    labels = [str(getattr(action, "label", ""))[:MAX_LABEL_CHARS] for action in pending]
    return tuple(labels[-MAX_PENDING_ACTIONS:])


def store_problem(error: BaseException) -> str:
    """A failed store call as one line for the user."""
    return " ".join(str(error).split()) or type(error).__name__


class AlertTap:
    """A session's alerts, as the alert sink delivers them, waiting for the next batch.

    Subscribed to the sink for one session (``SubscribeAlerts(address=tap)``),
    so it sees every alert of the session, whichever actor raised it. Thread
    safe: the sink calls :meth:`tell` from its own thread.
    """

    def __init__(self, maxlen: int = MAX_TAPPED_ALERTS) -> None:
        self._lock = threading.Lock()
        self._alerts: deque[Alert] = deque(maxlen=maxlen)

    def tell(self, alert: Alert) -> None:
        with self._lock:
            self._alerts.append(alert)

    def take(self, limit: int = MAX_BATCH_ALERTS) -> tuple[Alert, ...]:
        """The oldest ``limit`` waiting alerts (removed)."""
        with self._lock:
            count = min(limit, len(self._alerts))
            return tuple(self._alerts.popleft() for _ in range(count))

    def give_back(self, alerts: Sequence[Alert]) -> None:
        """Alerts of a batch that failed: first in line for the next one."""
        with self._lock:
            for alert in reversed(alerts):
                if len(self._alerts) == self._alerts.maxlen:
                    break
                self._alerts.appendleft(alert)

    def __len__(self) -> int:
        with self._lock:
            return len(self._alerts)


@dataclass
class Persistence:
    """One session's write-ahead state; outlives its worker's incarnations.

    The runtime makes one per session opened on a store and hands it to every
    incarnation of the session's worker (``WorkerConfig.persist``), as it does
    the session's :class:`~actors.worker.state.SessionState`.
    """

    store: SessionStore
    session_id: str
    saved: int = 0
    """``history[:saved]`` is in the store."""
    owed: int = 0
    """``history[:owed]`` belongs to reported turns (or inserts): what the store must get."""
    usage: Usage = field(default_factory=Usage)
    """Token usage of reported runs not yet written."""
    alerts: AlertTap = field(default_factory=AlertTap)
    labels: tuple[str, ...] | None = None
    """The pending-action labels the store has (None: never written by this process)."""
    incarnations: int = 0
    """Worker incarnations started: past the first, each is a restart (it reloads)."""
    writing: Future[Any] | None = None
    """The append in flight, if any: a restarted worker waits for it before it reloads."""
    wait_s: float = 30.0
    """How long a reload waits for an append the previous incarnation left running."""


@dataclass
class _Waiter:
    then: Callable[[str | None], None]
    owed: int
    """The history length this waiter needs saved."""
    scope: CancelScope | None = None
    """The work this save is for: once cancelled, ``then`` is not called (it would act
    for work that was called off)."""


class TurnWriter:
    """The worker's side of the write-ahead: one incarnation's queue of saves.

    ``save(then)`` writes everything owed and calls ``then(problem)`` in the
    worker's context -- ``None`` once it is in the store, or one line saying
    why it is not. Saves run one at a time; a save asked for while another
    runs is served by the next append, after it.
    """

    def __init__(self, worker: Any, persistence: Persistence) -> None:
        self.worker = worker
        self.p = persistence
        self._waiters: list[_Waiter] = []
        self._busy = False

    @property
    def history(self) -> list[Item]:
        history: list[Item] = self.worker.state.history
        return history

    # -- the first start or a restart -------------------------------------------------------

    def started(self) -> bool:
        """Count this incarnation; True if it is a restart (then :meth:`reload`)."""
        self.p.incarnations += 1
        return self.p.incarnations > 1

    def reload(self, done: Callable[[int, int, str | None], None]) -> None:
        """Read the session back from the store; ``done(kept, lost, problem)`` in the worker.

        On success history is replaced (see :func:`merge_reload`); on failure
        it is left as it was and ``problem`` says why.
        """
        p = self.p

        def fetch() -> Any:
            previous = p.writing
            if previous is not None:
                try:
                    previous.result(timeout=p.wait_s)
                except FutureTimeout:
                    pass
                except BaseException:  # its failure was the old incarnation's business
                    pass
            return p.store.load(p.session_id)

        def loaded(snapshot: Any) -> None:
            history, kept, lost = merge_reload(self.history, snapshot.items, p.owed)
            self.history[:] = history
            p.saved = len(snapshot.items)
            p.owed = len(history)
            done(kept, lost, None)

        def failed(error: BaseException) -> None:
            done(0, 0, store_problem(error))

        self.worker.run_blocking(fetch, then=loaded, on_error=failed)

    # -- saving -------------------------------------------------------------------------------

    def save(
        self,
        then: Callable[[str | None], None],
        *,
        usage: Usage | None = None,
        scope: CancelScope | None = None,
    ) -> bool:
        """Make everything in history so far durable, then ``then(problem)``.

        Returns False -- and does not call ``then`` -- when there is nothing to
        write and nothing being written: the caller goes on at once. With
        ``scope``, ``then`` is dropped if the scope was cancelled by the time
        the write is done (the write itself still happens: history is owed).
        """
        p = self.p
        if usage is not None and not _empty(usage):
            p.usage = add_usage(p.usage, usage)
        p.owed = max(p.owed, len(self.history))
        if not self._busy and not self._dirty():
            return False
        self._waiters.append(_Waiter(then, p.owed, scope))
        if not self._busy:
            self._start()
        return True

    def _dirty(self) -> bool:
        p = self.p
        if p.owed > p.saved or not _empty(p.usage) or len(p.alerts):
            return True
        labels = pending_labels(self.worker.config.services.pending_actions)
        return labels is not None and labels != (p.labels or ())

    def _start(self) -> None:
        p = self.p
        self._busy = True
        batch = _Batch(
            session_id=p.session_id,
            first=p.saved,
            end=p.owed,
            items=tuple(self.history[p.saved : p.owed]),
            usage=p.usage,
            alerts=p.alerts.take(),
            labels=pending_labels(self.worker.config.services.pending_actions),
        )
        p.usage = Usage()
        p.writing = self.worker.run_blocking(
            _write,
            p.store,
            batch,
            then=lambda outcome: self._written(batch, outcome),
            on_error=lambda error: self._written(batch, (0, error)),
        )

    def _written(self, batch: _Batch, outcome: tuple[int, BaseException | None]) -> None:
        written, error = outcome
        p = self.p
        self._busy = False
        p.writing = None
        p.saved = max(p.saved, batch.first + written)
        problem: str | None = None
        if error is None:
            if batch.labels is not None:
                p.labels = batch.labels
        else:
            problem = store_problem(error)
            if written == 0:  # nothing of it is in the store: it goes with the next batch
                p.usage = add_usage(batch.usage, p.usage)
                p.alerts.give_back(batch.alerts)
        done = [w for w in self._waiters if w.owed <= batch.end]
        self._waiters = [w for w in self._waiters if w.owed > batch.end]
        if self._waiters:
            self._start()  # saves asked for while this one ran
        for waiter in done:
            if waiter.scope is not None and waiter.scope.cancel_called:
                continue  # called off while it was written
            waiter.then(problem)


@dataclass(frozen=True)
class _Batch:
    """What one save writes: ``history[first:end]`` and the rest of a :class:`TurnBatch`."""

    session_id: str
    first: int
    end: int
    items: tuple[Item, ...]
    usage: Usage
    alerts: tuple[Alert, ...]
    labels: tuple[str, ...] | None


def _write(store: SessionStore, batch: _Batch) -> tuple[int, BaseException | None]:
    """Append ``batch`` on the blocking lane: ``(items written, error)``.

    Never raises: a failure after some chunks of a huge turn were written
    still reports how many items the store has.
    """
    written = 0
    parts = chunks(batch.items) or [()]
    usage = None if _empty(batch.usage) else batch.usage
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            store.append(
                batch.session_id,
                TurnBatch(
                    items=part,
                    usage=usage if last else None,
                    alerts=batch.alerts if last else (),
                    pending_actions=batch.labels if last else None,
                ),
            )
            written += len(part)
    except Exception as exc:
        return written, exc
    return written, None
