"""Tracking every process a ``shell`` call starts, so none outlives the call.

A command's children can leave its process group (``setsid``), shed the
environment marker the runtime used to sweep by (``env -i``, ``env -u``),
double-fork into daemons, or re-fork every few milliseconds so that a sweep
by pid always finds a fresh one. Tracking must therefore be something a
process cannot opt out of. Three backends, chosen once per process by
:func:`get_tracker` (``"auto"``) or by name (tests, benchmarks):

* :class:`CgroupTracker` (``"cgroup"``) -- **a cgroup v2 per call**. The
  cgroup2 mount is found in ``/proc/self/mounts`` and the runtime's own
  cgroup in ``/proc/self/cgroup``; a directory ``fore.<pid>.<id>`` is created
  under it, and one ``c<n>`` below that for each call. The command's bash
  joins its call's cgroup before it runs a single word of the command: a
  sealed, immutable ``memfd`` (one per call, closed in the runtime once bash
  has it) holding a four-line script is passed to bash
  as ``BASH_ENV``, which a non-interactive bash sources first (it writes
  ``$$`` into ``cgroup.procs``, closes the memfd and restores the caller's
  ``BASH_ENV`` / ``POSIXLY_CORRECT``; if the write fails the command does not
  run, exit 125). The script acknowledges the join on a pipe; a call whose
  bash never acknowledged it (killed before it could, or a bash that skipped
  ``BASH_ENV``) is swept like :class:`GroupTracker` does instead of trusting
  an empty cgroup, and logged. Every descendant is born in the cgroup whatever it does to
  its session, group or environment; ending the call writes ``cgroup.kill``
  (the kernel kills every member, including one forking at that moment),
  waits until ``cgroup.events`` says ``populated 0`` and removes the
  directory. Used only when a probe at first use shows it works end to end
  (mkdir, join, ``cgroup.kill``), the effective uid equals the real one (bash
  ignores ``BASH_ENV`` otherwise), and ``/bin/bash`` exists. Its limits: a
  process that may write ``cgroup.procs`` elsewhere (root, or the same user
  in a delegated subtree) can move itself out of the call's cgroup; a
  process another daemon starts on the command's behalf (``systemd-run``,
  ``at``, ``ssh localhost``, ``docker run``) was never the command's
  descendant. ``SHELLOPTS`` and ``BASHOPTS`` from the runtime's environment
  are not passed to the command's top shell (they could switch off
  ``BASH_ENV``).

* :class:`SubreaperTracker` (``"subreaper"``) -- where no cgroup can be
  created (no cgroup2, not writable, not delegated, kernel < 5.14 without
  ``cgroup.kill``). Each call runs under a small supervisor process
  (:mod:`actors.tools.proctrack._subreaper`, a fresh ``python -I -S``) that sets
  ``PR_SET_CHILD_SUBREAPER``: every orphaned descendant is reparented to it
  rather than to init, whatever its session or environment. When the command
  exits, or on cancel (SIGTERM to the supervisor), it kills the command's
  process group and then every descendant, round after round, until it has
  no child left -- a re-forker is killed with its whole tree each round, and
  a killed process cannot fork again -- bounded by :data:`SWEEP_BOUND_S`.
  Its limits: the supervisor runs as the same user, so a command that kills
  its parent (``kill -9 $PPID``) before escaping detaches its orphans (they
  go to init); the runtime then sees no ``swept`` report and falls back to
  the sweep of :class:`GroupTracker` (process group, session and the
  environment marker), which catches what kept any of them. It costs a
  Python start per call (25-60 ms on a loaded 2-core machine, measured in
  ``bench/tools.py``), and the same "another daemon started it" limit applies.

* :class:`GroupTracker` (``"group"``) -- off Linux, or where neither works:
  the command leads its own session and process group; the group is killed
  when the call ends, and processes created since the call started are swept
  by their session id and by the environment marker ``FORE_SHELL_CALL``.
  ``setsid`` plus ``env -i`` escapes it: it is a convenience, not a boundary.

Every backend also gives each call's processes the marker
``FORE_SHELL_CALL=<random token>`` (cheap, and what the last-resort sweep
reads). ``kill()`` is what the cancel callback calls: it never blocks (a
write to ``cgroup.kill``, a signal through a pidfd). ``finish()`` runs on the
tool's thread after the command: it kills what is left and waits, bounded,
until nothing is.

Layout: this package chooses the backend (:func:`get_tracker`); the backends
are :mod:`.cgroup`, :mod:`.subreaper` and :mod:`.sweep` (``"group"`` and the
last-resort sweep), over what they share in :mod:`.base`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from fore.actors.tools.proctrack.base import (
    CALL_MARKER,
    MAX_NICE,
    TrackedCall,
    Tracker,
    TrackingKind,
    log,
)
from fore.actors.tools.proctrack.cgroup import CgroupTracker
from fore.actors.tools.proctrack.subreaper import SubreaperTracker
from fore.actors.tools.proctrack.sweep import GroupTracker
from fore.errors import TrackingUnavailable

__all__ = [
    "CALL_MARKER",
    "MAX_NICE",
    "TrackedCall",
    "Tracker",
    "TrackingKind",
    "TrackingUnavailable",
    "get_tracker",
    "tracking_unavailable",
]
"""What the ``shell`` tool and the benchmarks use: a tracker and what it hands out
(``TrackingUnavailable`` is defined in :mod:`fore.errors`, the one exception tree)."""

_trackers: dict[str, Tracker] = {}
_failures: dict[str, str] = {}
_choose_lock = threading.Lock()
_FACTORIES: dict[str, Callable[[], Tracker]] = {
    "cgroup": CgroupTracker,
    "subreaper": SubreaperTracker,
    "group": GroupTracker,
}


def get_tracker(kind: TrackingKind = "auto") -> Tracker:
    """The process-wide tracker of ``kind``; ``"auto"`` is the strongest that works here.

    A named backend that cannot work raises :class:`TrackingUnavailable`
    (tests select backends by name and skip on that). Each backend is set up
    (and probed) once per process.
    """
    with _choose_lock:
        if kind != "auto":
            return _make(kind)
        for name in ("cgroup", "subreaper", "group"):
            try:
                tracker = _make(name)
            except TrackingUnavailable:
                continue
            if name != "cgroup":
                log.info("shell_tracking_fallback", backend=name, why=_failures.get("cgroup"))
            return tracker
        raise TrackingUnavailable("no process tracking works here")  # pragma: no cover


def _make(kind: str) -> Tracker:
    if kind in _trackers:
        return _trackers[kind]
    if kind in _failures:
        raise TrackingUnavailable(_failures[kind])
    factory = _FACTORIES.get(kind)
    if factory is None:
        raise ValueError(f"unknown process tracking backend {kind!r}")
    try:
        tracker = factory()
    except TrackingUnavailable as exc:
        _failures[kind] = str(exc)
        raise
    _trackers[kind] = tracker
    return tracker


def tracking_unavailable(kind: str) -> str | None:
    """Why backend ``kind`` cannot work here (None: it can). Sets it up if needed."""
    try:
        get_tracker(kind)  # type: ignore[arg-type]
    except TrackingUnavailable as exc:
        return str(exc)
    return None
