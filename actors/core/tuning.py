"""Garbage-collector and GIL settings for a process that hosts a runtime.

CPython's default thresholds (700, 10, 10) suit small scripts. A runtime
allocates constantly -- messages, futures, stream events -- so a young
collection runs every few hundred allocations, and every so often a full
collection walks the whole heap while holding the GIL: every actor, the LLM
loop and every tool thread stop. With 200 sessions in ``fore bench`` those
full collections took 170-310 ms each (measured here, 2 cores), longer than
the accept (20 ms) and abort (10 ms) budgets. Two changes, the usual ones for
long-running Python services:

* ``gc.freeze()`` once, after a full collection, when the first runtime of
  the process starts: what exists then (modules, classes, the runtime's
  own singletons) lives for the whole process, so later full collections
  need not walk it;
* other thresholds while a runtime is open: a young collection every
  10,000 allocations instead of 700 (each collection is somewhat longer,
  there are far fewer of them, and most young objects are already dead by
  then); the middle generation every 2 young collections instead of 10. A
  middle collection walks every object promoted since the last one, so after
  10 young ones it took 27-47 ms in ``fore bench`` -- the pauses that made
  the main-turn p99 -- and after 2 it takes 11-17 ms: the same total work in
  shorter stops. The oldest generation is asked 5x as often in turn
  (threshold 50 instead of 10), so full collections stay as rare as before
  (CPython also waits until the objects added since the last one are a
  quarter of the old generation). The hot paths leave no reference cycles
  (``tests/core/test_reference_cycles.py``), so young objects die by reference
  counting and collections find little to do.

* a GIL switch interval of 1 ms instead of 5: a thread that comes back
  from a syscall (a socket read, a file operation of an overlay apply) waits
  for the GIL until the running thread is made to drop it, so every syscall
  of a latency-critical path can cost up to the interval when the process
  is busy. An overlay apply is dozens of syscalls; its p99 under the
  200-session load fell from 24 to 13 ms with 1 ms (measured here).

:func:`tune` and :func:`untune` are reference-counted: several runtimes in a
process share one setting, and the previous thresholds come back when the
last one closes -- the freeze included (``gc.unfreeze()``), so a host process
is left as it was. It is opt-in: ``Runtime(tune_process=True)``, which the
``fore`` CLI's ``bench`` and ``chat`` use; a runtime embedded in an
application leaves the interpreter's settings to the application.
"""

from __future__ import annotations

import gc
import sys
import threading

from fore.actors.core.logs import get_logger

log = get_logger(__name__)

THRESHOLDS = (10_000, 2, 50)
SWITCH_INTERVAL_S = 0.001

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] | None = None
_saved_switch: float | None = None
_frozen = False


def tune() -> None:
    """Apply the runtime's collector settings (counted; see the module docs)."""
    global _users, _saved, _saved_switch, _frozen
    with _lock:
        _users += 1
        if _users > 1:
            return
        _saved = gc.get_threshold()
        _saved_switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if not _frozen:
            gc.collect()
            gc.freeze()
            _frozen = True
        gc.set_threshold(*THRESHOLDS)
    log.debug("gc_tuned", thresholds=THRESHOLDS, frozen=gc.get_freeze_count())


def untune() -> None:
    """Undo one :func:`tune`; the last one restores the previous thresholds."""
    global _users, _saved, _saved_switch, _frozen
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users > 0 or _saved is None:
            return
        gc.set_threshold(*_saved)
        _saved = None
        if _frozen:
            gc.unfreeze()
            _frozen = False
        if _saved_switch is not None:
            sys.setswitchinterval(_saved_switch)
            _saved_switch = None


def users() -> int:
    """How many runtimes currently hold the tuning."""
    with _lock:
        return _users
