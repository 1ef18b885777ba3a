"""Who holds a lease: an owner id that says which process, and whether it is gone.

A lease row names its holder with an owner id ``host/pid/started/machine/nonce``:

* ``host`` and ``pid`` are for people (``SessionLeased`` names them);
* ``started`` is the process's start time, so a reused pid is not mistaken
  for the holder;
* ``machine`` is the kernel's boot id and the pid namespace, so two containers
  that share a host name (and a PostgreSQL store) never judge each other's pids;
* ``nonce`` tells apart two stores opened in one process.

A lease ends when its holder releases it or when it expires (its holder
stopped renewing it). On one machine the store can tell more: a holder on the
same host, boot and pid namespace whose process no longer exists (killed,
crashed) cannot renew, so its lease is taken over at once instead of after
the TTL. Anything not certainly dead -- another machine, a foreign owner
string -- is only ever outlived.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from functools import lru_cache

import psutil


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    started: str
    machine: str
    nonce: str

    def __str__(self) -> str:
        return f"{self.host}/{self.pid}/{self.started}/{self.machine}/{self.nonce}"


def _clean(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in text)[:64] or "unknown"


@lru_cache(maxsize=1)
def _machine() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip().replace("-", "")[:16]
    except OSError:
        boot = "noboot"
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = "nons"
    return f"{_clean(boot)}-{pidns}"


def _started(pid: int) -> str | None:
    """The start time of a running process ``pid``; ``None`` if there is none (or a zombie).

    Raises :class:`psutil.AccessDenied` when the system will not say.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None  # killed, not yet reaped: it will never renew anything
        return f"{process.create_time():.2f}"
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def this_process() -> Owner:
    """A new owner id for a store opened by this process."""
    pid = os.getpid()
    return Owner(
        host=_clean(socket.gethostname()),
        pid=pid,
        started=_own_start(pid),
        machine=_machine(),
        nonce=uuid.uuid4().hex[:12],
    )


def _own_start(pid: int) -> str:
    try:
        return _started(pid) or "0"
    except (psutil.Error, OSError):
        return "0"


def parse_owner(text: str) -> Owner | None:
    """The owner an id names, or ``None`` for an id not made by :func:`this_process`."""
    parts = text.split("/")
    if len(parts) != 5 or not parts[1].isdigit():
        return None
    return Owner(parts[0], int(parts[1]), parts[2], parts[3], parts[4])


def describe(text: str) -> str:
    """A holder for people: ``pid 1234 on host build-7`` (or the raw id)."""
    owner = parse_owner(text)
    return text[:120] if owner is None else f"pid {owner.pid} on host {owner.host}"


def certainly_dead(text: str) -> bool:
    """Whether the holder ``text`` is a process of this machine that no longer runs."""
    owner = parse_owner(text)
    if owner is None or owner.machine != _machine() or owner.host != _clean(socket.gethostname()):
        return False
    if owner.pid == os.getpid():
        return False  # another store of this very process: alive while we are
    try:
        started = _started(owner.pid)
    except (psutil.Error, OSError):
        return False  # the system will not say: not proof
    if owner.started == "0":  # its start time was unknown: only a missing pid is proof
        return started is None
    return started is None or started != owner.started
