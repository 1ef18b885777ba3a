"""Did a real path change after an instant? File ctimes against a speculation's start.

A speculation computes its edits from the session's history, not from the files
as they are when it writes. If the user changed a file after the speculation
started, applying the speculation's version would silently replace the user's
edit -- even when the speculation never read the file (it relied on history) or
read it in a way the overlay cannot see (``shell cat``). So the overlay asks, at
its first touch of a path, "did this path change after the speculation
started?" and, if it did, refuses to apply over it (a conflict).

The answer comes from the inode's **ctime**: the kernel sets it on every change
of content, metadata, link count or name (a rename), and no user tool can set it
back (``utime``/``touch -d`` set atime and mtime only). Comparing it with an
instant needs care:

* **The kernel's clock is coarse.** File times are stamped with the coarse
  realtime clock (``CLOCK_REALTIME_COARSE``, one tick = 1 to 10 ms, and it lags
  the fine clock by more under load); a fine ``time.time_ns()`` read at the
  start can be *later* than the stamp of a change made after it. So an
  :class:`Instant` reads the coarse clock (``wall_ns``): every change made
  after it is stamped at or after it. A change made shortly before it may be
  stamped at or after it too; :func:`changed_since` counts such a change as
  made after the start -- a needless conflict at worst, never a lost edit.
* **Multigrain filesystems are exact.** Since Linux 6.13, ext4, xfs, btrfs and
  tmpfs stamp with ``max(coarse clock, floor)``, where the floor is the latest
  fine-grained stamp the kernel handed out, and hand out a fine-grained stamp
  (raising the floor) when a file whose stamp was looked at changes again
  within the same coarse value. An :class:`Instant` forces one on a private
  memory file (``fine_ns``): it is strictly later than every stamp handed out
  before, and no stamp handed out after is below it. On such a workspace the
  comparison is with ``fine_ns``: no change made before the start counts as
  after it, and none made after it is missed. (Only when the workspace's
  filesystem is one of those, on such a kernel: another filesystem may stamp a
  later change below ``fine_ns``, so it is compared with ``wall_ns``.)
* **Granularity.** Filesystems truncate stamps (1 s on ext3 or old ext4 inodes,
  2 s on FAT): the start is truncated the same way before comparing, the
  granularity guessed from the stamp's trailing zeros.
* **Fore's own writes.** A main turn's tools or an accepted overlay may write a
  file in the very tick a speculation starts (a pipelined speculation starts
  right after the previous accept). Those changes are the speculation's
  baseline, not a user's edit, so :data:`OWN_CHANGES` records the identity
  (inode, size, mtime, ctime, mode) each of Fore's own changes left and the
  monotonic instant it was done; a path still carrying exactly that identity,
  left before the start, is not "changed since" it.

Limits (documented in docs/architecture.md's threat model): a realtime clock
stepped backwards, or a network filesystem stamping with a skewed server clock,
can hide a change from this check; the content hash the overlay records at its
first touch of a path still catches every change made after that touch.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

__all__ = [
    "OWN_CHANGES",
    "Instant",
    "OwnChanges",
    "Stamp",
    "changed_since",
    "coarse_now_ns",
    "multigrain",
    "record_own",
    "wait_for_tick",
]

_CLOCK_REALTIME_COARSE = 5
"""Linux's clock id (``time`` does not export the name)."""


def _coarse_clock() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    except OSError:  # pragma: no cover - every Linux since 2.6.32 has it
        return None
    return _CLOCK_REALTIME_COARSE


_COARSE = _coarse_clock()


def coarse_now_ns() -> int:
    """The clock file times are stamped with (the realtime clock elsewhere).

    Other systems stamp files with the fine realtime clock (APFS) or a coarser
    granularity than it (HFS+: 1 s), both of which :func:`changed_since` handles.
    """
    if _COARSE is None:
        return time.time_ns()
    return time.clock_gettime_ns(_COARSE)


@dataclass(frozen=True, slots=True)
class Stamp:
    """Cheap identity of a file version: if it is unchanged, so is the content."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class Instant:
    """A moment file stamps and Fore's own writes are compared with (see module docs)."""

    wall_ns: int
    """The coarse realtime clock (what the kernel stamps ctimes with)."""
    mono_ns: int
    """``time.monotonic_ns()`` (orders Fore's own changes; immune to clock steps)."""
    fine_ns: int | None = None
    """A fine-grained stamp forced at this instant (multigrain kernels only)."""

    @classmethod
    def now(cls) -> Instant:
        wall = coarse_now_ns()
        fine = _PROBE.stamp()
        return cls(wall, time.monotonic_ns(), fine if fine is not None and fine > wall else None)

    def threshold(self, *, multigrain: bool) -> int:
        """The earliest stamp a change made after this instant can carry."""
        if multigrain and self.fine_ns is not None:
            return self.fine_ns
        return self.wall_ns


class _Probe:
    """Reads the file clock by stamping a private memory file (made and closed per read:
    no descriptor outlives the call)."""

    def __init__(self) -> None:
        self._failed = not hasattr(os, "memfd_create")

    def stamp(self) -> int | None:
        """Force a fresh stamp: twice a ``chmod`` of a file whose stamp was just read.

        On a multigrain kernel the second change of a file whose ctime was
        looked at within one coarse value gets a fine-grained stamp, strictly
        later than every stamp handed out before (and it becomes the floor of
        every later one). Elsewhere the result is a coarse stamp.
        """
        if self._failed:
            return None
        try:
            fd = os.memfd_create("fore-file-clock", os.MFD_CLOEXEC)
        except OSError:
            self._failed = True
            return None
        try:
            for _ in range(2):
                os.fstat(fd)
                os.fchmod(fd, 0o600)
            return os.fstat(fd).st_ctime_ns
        except OSError:
            return None
        finally:
            os.close(fd)


_PROBE = _Probe()

_MULTIGRAIN_TYPES = frozenset({"ext4", "xfs", "btrfs", "tmpfs"})
_MULTIGRAIN_KERNEL = (6, 13)
_multigrain_devs: dict[int, bool] = {}


def multigrain(path: str | os.PathLike[str]) -> bool:
    """Whether the filesystem holding ``path`` stamps with multigrain timestamps.

    Linux 6.13 or later, and a filesystem of a type known to support them
    (from ``/proc/self/mountinfo``); anything unknown is "no" (the safe side).
    """
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return False
    known = _multigrain_devs.get(dev)
    if known is None:
        known = _multigrain_devs[dev] = _kernel_multigrain() and _fs_type(dev) in _MULTIGRAIN_TYPES
    return known


def _kernel_multigrain() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    release = platform.release().split(".")
    try:
        return (int(release[0]), int(release[1].split("-")[0])) >= _MULTIGRAIN_KERNEL
    except (IndexError, ValueError):
        return False


def _fs_type(dev: int) -> str | None:
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 3 and fields[2] == wanted and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except OSError:
        return None
    return None


def _grain(stamp_ns: int) -> int:
    """The coarsest granularity a stamp is consistent with (1 ns .. 2 s)."""
    if stamp_ns % 1_000_000_000 == 0:
        return 2_000_000_000 if stamp_ns % 2_000_000_000 == 0 else 1_000_000_000
    grain = 1
    while grain < 100_000_000 and stamp_ns % (grain * 10) == 0:
        grain *= 10
    return grain


def stamped_since(ctime_ns: int, start: Instant, *, multigrain: bool = False) -> bool:
    """Whether a change stamped ``ctime_ns`` may have happened at or after ``start``.

    The threshold is truncated to the stamp's granularity: a filesystem with
    1 s stamps gives a change made just after the start the start's second.
    """
    threshold = start.threshold(multigrain=multigrain)
    return ctime_ns >= threshold - threshold % _grain(ctime_ns)


def changed_since(st: os.stat_result | Stamp, start: Instant, *, multigrain: bool = False) -> bool:
    """Whether the path ``st`` describes may have changed at or after ``start``.

    False only when its ctime says it did not, or when it still carries exactly
    the identity one of Fore's own changes left before ``start``. ``multigrain``:
    the path's filesystem stamps with multigrain timestamps (:func:`multigrain`).
    """
    stamp = st if isinstance(st, Stamp) else Stamp.of(st)
    if not stamped_since(stamp.ctime_ns, start, multigrain=multigrain):
        return False
    return not OWN_CHANGES.left_before(stamp, start.mono_ns)


class OwnChanges:
    """The identities Fore's own changes left on real paths, recently (bounded).

    Keyed by ``(dev, ino)``; the newest change of an inode replaces the older
    one. Only recent entries matter (a change older than a tick is before any
    later start anyway), so the oldest are dropped beyond ``capacity``:
    forgetting one can only cause a needless conflict, never hide a user's
    change.
    """

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, int], tuple[Stamp, int]] = OrderedDict()

    def record(self, st: os.stat_result | Stamp) -> None:
        stamp = st if isinstance(st, Stamp) else Stamp.of(st)
        now = time.monotonic_ns()
        key = (stamp.dev, stamp.ino)
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (stamp, now)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def left_before(self, stamp: Stamp, mono_ns: int) -> bool:
        """Whether ``stamp`` is exactly what one of our changes left, before ``mono_ns``."""
        with self._lock:
            entry = self._entries.get((stamp.dev, stamp.ino))
        return entry is not None and entry[0] == stamp and entry[1] < mono_ns

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


OWN_CHANGES = OwnChanges()
"""The process's registry (every workspace view and every apply records into it)."""


def record_own(st: os.stat_result | Stamp) -> None:
    """Record that Fore itself left the path ``st`` describes as it is now."""
    OWN_CHANGES.record(st)


def wait_for_tick(*, limit_s: float = 1.0) -> None:
    """Return once every file stamped so far is older than the next :meth:`Instant.now`.

    Stamps can run ahead of the coarse clock (a multigrain filesystem stamps with
    a fine time when the old stamp was looked at, and the coarse clock lags the
    fine one by up to a tick or more under load), but never ahead of the fine
    clock: so this waits (at most ``limit_s``) until the coarse clock passes the
    fine clock's reading at the call. Tests and benchmarks call it after
    preparing a workspace, so that what they wrote is not taken for a change
    made after a speculation they start next (a real user's files are older,
    and Fore's own writes are recorded instead).
    """
    target = time.time_ns()
    deadline = time.monotonic() + limit_s
    while coarse_now_ns() <= target and time.monotonic() < deadline:
        time.sleep(0.0005)
