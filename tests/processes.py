"""Looking at this test run's processes (which may exit, or be reaped, while we look)
and at this process's open descriptors."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, not a zombie (it may go between the two looks)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess too
        return False


def descendants(marker: str) -> list[psutil.Process]:
    """This process's live descendants whose command line contains ``marker``."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE and marker in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:  # exited meanwhile (psutil.ZombieProcess is one)
            pass
    return found


def fds_under(path: Path) -> list[str]:
    """What this process's open descriptors under ``path`` point at.

    Only under ``path``: the process's total count also moves with what other tests'
    leftover threads open and close meanwhile.
    """
    path = path.resolve()  # as the kernel names it
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor, too)
            continue
        if target == str(path) or target.startswith(f"{path}/"):
            found.append(target)
    return found
