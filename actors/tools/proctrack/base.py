r"""What every process-tracking backend is: a :class:`Tracker` that spawns
:class:`TrackedCall`\ s, and the pieces they share (starting bash, pidfds).

The backends and how one is chosen are described in :mod:`actors.tools.proctrack`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Literal

from fore.actors.core.logs import get_logger

# The tracking's one logger, for every backend: its events keep the name they
# had before the package was split.
log = get_logger("fore.actors.tools.proctrack")

TrackingKind = Literal["auto", "cgroup", "subreaper", "group"]

CALL_MARKER = "FORE_SHELL_CALL"
"""The environment variable that marks every process of one shell call."""

SWEEP_BOUND_S = 5.0
"""How long a backend keeps killing (and waiting for) a call's processes before it gives up
and logs what is left."""

BASH = "/bin/bash"


class TrackedCall(ABC):
    """One running command and everything it starts."""

    proc: subprocess.Popen[bytes]
    token: str
    backend: str

    @abstractmethod
    def kill(self) -> None:
        """Kill the command and everything it started; never blocks (cancel callbacks)."""

    @abstractmethod
    def finish(self) -> int:
        """After the command: kill what is left, wait until none is (bounded), release.

        Returns how many leftover processes were killed (when the backend knows).
        """

    def returncode(self) -> int | None:
        """The command's exit status as ``Popen.returncode`` reports it."""
        return self.proc.returncode


class Tracker(ABC):
    kind: str

    @abstractmethod
    def spawn(self, command: str, *, cwd: str, env: Mapping[str, str]) -> TrackedCall:
        """Start ``bash -c command`` (stdin ``/dev/null``, stdout/stderr pipes)."""


def _popen(
    argv: list[str], cwd: str, env: Mapping[str, str], **extra: object
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        env=dict(env),
        **extra,
    )


def _pidfd(pid: int) -> int:
    """A pidfd pinning ``pid`` (so a kill cannot hit a reused pid); -1 if unsupported, -2 gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -2
    except (OSError, AttributeError):
        return -1


def _signal_pidfd(fd: int, pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
