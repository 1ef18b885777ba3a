"""Blocking lanes: bounded, lazily started, and never an unbounded wait at shutdown.

A user hook may never return (a confirmation prompt nobody answers). Such a
job must not hang ``ActorSystem.shutdown`` or the interpreter's exit, and
hooks waiting on people must not take the threads the runtime's own blocking
work needs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError

import pytest

from fore.actors.core import ActorSystem
from fore.actors.core.blocking import BlockingLane

WAIT = 30.0


@pytest.fixture
def lane() -> Iterator[BlockingLane]:
    lane = BlockingLane(2, name="test-lane")
    yield lane
    lane.shutdown(timeout=WAIT)


def test_results_and_exceptions_come_back_through_the_future(lane: BlockingLane) -> None:
    assert lane.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=WAIT) == 5
    failed = lane.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=WAIT)
    # A BaseException in a job is the job's outcome, not the death of a lane thread.
    exited = lane.submit(sys.exit, 3)
    with pytest.raises(SystemExit):
        exited.result(timeout=WAIT)
    assert lane.submit(str, 7).result(timeout=WAIT) == "7"


def test_threads_start_lazily_up_to_the_bound(lane: BlockingLane) -> None:
    assert lane.threads == 0
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(WAIT)

    futures = [lane.submit(hold) for _ in range(5)]
    try:
        assert started.acquire(timeout=WAIT) and started.acquire(timeout=WAIT)
        assert lane.threads == 2
        assert lane.queued == 3
    finally:
        release.set()
    for future in futures:
        future.result(timeout=WAIT)
    assert lane.threads == 2  # kept for the next job, not one per job


def test_a_second_job_does_not_wait_behind_a_slow_one_while_there_is_room() -> None:
    lane = BlockingLane(2, name="room")
    release = threading.Event()
    try:
        slow = lane.submit(release.wait, WAIT)
        quick = lane.submit(lambda: "quick")
        assert quick.result(timeout=WAIT) == "quick"  # ran on a second thread
        assert not slow.done()
    finally:
        release.set()
        assert lane.shutdown(timeout=WAIT)


def test_shutdown_cancels_queued_work_and_refuses_new_work() -> None:
    lane = BlockingLane(1, name="cancel")
    release, started = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return release.wait(WAIT)

    running = lane.submit(hold)
    queued = lane.submit(lambda: "never")
    # Running, not just submitted: a job still queued at shutdown is cancelled (the
    # lane's thread may not have taken it yet on a busy machine).
    assert started.wait(WAIT)
    try:
        # the queue is cancelled while the job still runs, whatever the machine's pace
        assert not lane.shutdown(cancel_pending=True, wait=False)
        release_later = threading.Timer(0.05, release.set)
        release_later.start()
        assert lane.shutdown(timeout=WAIT)  # waits for the running job's end
        assert running.done()
    finally:
        release.set()
    assert running.result(timeout=WAIT) is True
    with pytest.raises(CancelledError):
        queued.result(timeout=WAIT)
    with pytest.raises(RuntimeError, match="shut down"):
        lane.submit(lambda: None)


def test_a_job_that_never_returns_does_not_hang_shutdown() -> None:
    lane = BlockingLane(1, name="hung")
    never = threading.Event()
    started = threading.Event()

    def hang() -> None:
        started.set()
        never.wait()

    lane.submit(hang)
    assert started.wait(WAIT)
    assert lane.shutdown(timeout=0.2) is False  # abandoned, and it says so
    never.set()


def test_a_hung_lane_job_does_not_hold_up_the_interpreter_exit() -> None:
    """The process ends although a lane job still blocks (its thread is a daemon)."""
    code = (
        "import threading\n"
        "from actors.core.blocking import BlockingLane\n"
        "lane = BlockingLane(1, name='exit')\n"
        "started = threading.Event()\n"
        "lane.submit(lambda: (started.set(), threading.Event().wait()))\n"
        "assert started.wait(10)\n"
        "print('leaving')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leaving"


def test_system_shutdown_with_a_hung_hook_returns_and_reports_it_unclean() -> None:
    system = ActorSystem(name="hung-hook", dispatcher_threads=2, hook_threads=1)
    never = threading.Event()
    started = threading.Event()

    def hook() -> None:
        started.set()
        never.wait()

    system.hooks.submit(hook)
    assert started.wait(WAIT)
    try:
        assert system.shutdown(timeout=0.5) is False
    finally:
        never.set()


def test_hooks_have_a_lane_of_their_own() -> None:
    """Every hook thread waiting on a person leaves the runtime's blocking work running."""
    system = ActorSystem(name="lanes", dispatcher_threads=2, blocking_threads=1, hook_threads=1)
    release = threading.Event()
    try:
        held = system.hooks.submit(release.wait, WAIT)
        assert system.blocking.submit(lambda: "disk work").result(timeout=WAIT) == "disk work"
        assert not held.done()
    finally:
        release.set()
        assert system.shutdown(timeout=WAIT)
