r"""What every process-tracking backend is: a :class:`Tracker` that spawns
:class:`TrackedCall`\ s, and the pieces they share (starting bash, pidfds).

The backends and how one is chosen are described in :mod:`actors.tools.proctrack`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
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

MAX_NICE = 19
"""The lowest CPU priority there is (``nice(1)``'s range is -20..19)."""


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
    def spawn(
        self, command: str, *, cwd: str, env: Mapping[str, str], nice: int = 0
    ) -> TrackedCall:
        """Start ``bash -c command`` (stdin ``/dev/null``, stdout/stderr pipes).

        ``nice``: how much lower than the runtime's the command's CPU priority
        is (0 to :data:`MAX_NICE`; see :func:`bash_argv`).
        """


@functools.cache
def _nice_binary() -> str | None:
    return shutil.which("nice")


def bash_argv(command: str, nice: int = 0) -> list[str]:
    """The argv that runs ``bash -c command``, ``nice`` steps below the runtime's priority.

    The priority is set by ``nice(1)`` exec'ing bash -- same pid, so the
    backends' process group, cgroup join and supervisor see bash as before --
    so it holds from the command's first instruction and every process it
    starts inherits it (a ``setpriority`` after the spawn would race with
    the children bash forks at once). Lowering a priority needs no privilege.
    Without a ``nice`` binary the command runs at the runtime's priority: a
    scheduling preference is not worth refusing a call over.
    """
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice must be within 0..{MAX_NICE}, not {nice}")
    binary = _nice_binary() if nice else None
    if binary is None:
        return [BASH, "-c", command]
    return [binary, "-n", str(nice), BASH, "-c", command]


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
