"""The tool runner's threads: no job is ever left without a thread, and a full runner says so.

The idle-timeout race is made deterministic through the runner's ``_next_job``
seam: the test decides when an idle thread's wait "times out", after a submit
has already counted that thread as idle. Nothing here asserts on durations;
waits are bounded only so a broken runner fails instead of hanging.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

import fore.testing
from fore.actors.tools.runner import Job, RunnerSaturated, ThreadRunner

WAIT = 15.0


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def _recorder() -> tuple[list[Any], threading.Event, Callable[[Any, BaseException | None], None]]:
    results: list[Any] = []
    done = threading.Event()

    def on_done(result: Any, error: BaseException | None) -> None:
        results.append(error if error is not None else result)
        done.set()

    return results, done, on_done


class RacyRunner(ThreadRunner):
    """Its threads' second idle wait "times out" only after the test has submitted a job."""

    def __init__(self) -> None:
        super().__init__(name="racy", idle_ttl=WAIT)
        self.waits = 0
        self.idle_again = threading.Event()
        self.submitted = threading.Event()

    def _next_job(self) -> Job | None:
        self.waits += 1
        if self.waits == 2:
            self.idle_again.set()
            assert self.submitted.wait(WAIT)
            raise queue.Empty  # the idle wait expired just as the submit counted on it
        return super()._next_job()


def test_a_thread_timing_out_while_a_job_is_submitted_stays_for_the_job() -> None:
    runner = RacyRunner()
    try:
        first, first_done, on_first = _recorder()
        runner.submit(lambda: "first", on_first)
        assert first_done.wait(WAIT) and first == ["first"]
        assert runner.idle_again.wait(WAIT)
        assert runner.thread_count == 1  # the one idle thread: the submit will count on it
        second, second_done, on_second = _recorder()
        runner.submit(lambda: "second", on_second)
        assert runner.thread_count == 1  # no new thread was started for the job
        runner.submitted.set()
        assert second_done.wait(WAIT), "the job was stranded without a thread"
        assert second == ["second"]
    finally:
        runner.submitted.set()
        runner.shutdown(timeout=5)


def test_idle_threads_exit_when_no_job_needs_them() -> None:
    runner = ThreadRunner(name="ttl", idle_ttl=0.01)
    try:
        _results, done, on_done = _recorder()
        runner.submit(lambda: 1, on_done)
        assert done.wait(WAIT)
        wait_until(lambda: runner.thread_count == 0)
    finally:
        runner.shutdown(timeout=5)


def test_a_full_runner_refuses_new_jobs_clearly_and_recovers() -> None:
    runner = ThreadRunner(name="full", max_threads=2)
    release = threading.Event()
    try:
        for _ in range(2):
            runner.submit(lambda: release.wait(WAIT), lambda result, error: None)
        with pytest.raises(RunnerSaturated, match="no tool thread is free"):
            runner.submit(lambda: "never", lambda result, error: None)
        assert runner.busy_count == 2
        release.set()
        results, done, on_done = _recorder()
        wait_until(lambda: runner.busy_count == 0)
        runner.submit(lambda: "after", on_done)
        assert done.wait(WAIT) and results == ["after"]
    finally:
        release.set()
        runner.shutdown(timeout=5)


def test_a_job_submitted_from_a_result_callback_reuses_the_reporting_thread() -> None:
    # The pool starts the next call when a result arrives; with one thread
    # allowed, that must never look like a full runner.
    runner = ThreadRunner(name="chain", max_threads=1)
    finished = threading.Event()
    count = [0]
    errors: list[BaseException] = []

    def next_job(result: Any, error: BaseException | None) -> None:
        count[0] += 1
        if count[0] == 50:
            finished.set()
            return
        try:
            runner.submit(lambda: None, next_job)
        except BaseException as exc:
            errors.append(exc)
            finished.set()

    try:
        runner.submit(lambda: None, next_job)
        assert finished.wait(WAIT)
        assert errors == []
        assert count[0] == 50
    finally:
        runner.shutdown(timeout=5)


def test_a_raising_job_reports_its_exception() -> None:
    runner = ThreadRunner(name="raise")
    try:
        results, done, on_done = _recorder()

        def boom() -> None:
            raise KeyError("kaboom")

        runner.submit(boom, on_done)
        assert done.wait(WAIT)
        assert isinstance(results[0], KeyError)
    finally:
        runner.shutdown(timeout=5)
