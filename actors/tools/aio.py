"""The tool layer's event loop: ``async def`` tools and MCP connections run here.

A thread of its own running one asyncio loop (uvloop where available, like
the LLM loops), started lazily -- a runtime whose tools are all synchronous
never starts it -- and closed by the runtime. Nothing here ever runs on a
dispatcher thread: the pool submits a coroutine factory and gets the result
back through a callback, which posts it to the pool actor as a message.

**Cancellation.** :meth:`ToolLoop.submit` ties the task to the call's
:class:`~actors.tools.cancel.CancelToken`: when the pool times the call out or
cancels it, the token's callback cancels the task on the loop
(``task.cancel()``), so the tool's coroutine receives ``CancelledError`` at
its next ``await`` -- unlike a thread, an async tool really stops. A
coroutine that swallows the cancellation and keeps going stays a *zombie*
exactly as a stuck thread does (the pool keeps its slot until it ends).

**Isolation.** Every call is its own task; whatever one raises is its own
result (``SystemExit`` and ``KeyboardInterrupt`` too, which asyncio would
otherwise let out of the loop). A coroutine that *blocks* (``time.sleep``, a CPU loop) holds the
whole loop, as it would any asyncio program: such work belongs in a
synchronous tool (a thread of its own) or in ``await asyncio.to_thread(...)``.

**Shutdown.** :meth:`ToolLoop.close` runs the registered closers (the MCP
connections), cancels every task still running, waits for them within its
deadline, then stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fore.actors.core.logs import get_logger
from fore.actors.tools.cancel import CancelToken
from fore.errors import ToolLoopClosed

log = get_logger(__name__)

T = TypeVar("T")

OnDone = Callable[[Any, BaseException | None], None]
_Job = tuple[Callable[[], Coroutine[Any, Any, Any]], OnDone, CancelToken | None]


class ToolLoop:
    """One asyncio thread for the tool layer (see module docs); thread-safe."""

    def __init__(self, *, name: str = "fore-tool-aio") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        """Running tasks (asyncio keeps only weak references to tasks)."""
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._incoming: deque[_Job] = deque()
        """Submitted jobs the loop has not taken yet (guarded by ``_lock``)."""
        self._draining = False
        """A drain is scheduled on the loop: further submits need not wake it."""

    # -- lifecycle ------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._loop is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started on first use; :class:`ToolLoopClosed` once closed."""
        loop = self._loop
        if loop is not None and not self._closed:
            return loop
        with self._lock:
            if self._closed:
                raise ToolLoopClosed("the tool event loop is shut down")
            if self._loop is None:
                self._loop = self._start_thread()
            return self._loop

    def _start_thread(self) -> asyncio.AbstractEventLoop:
        from fore.actors.llm import evloop  # uvloop when installed (the LLM loops' choice)

        loop = evloop.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                while True:
                    try:
                        loop.run_forever()
                    except BaseException:  # pragma: no cover - _guarded keeps them in tasks
                        log.exception("tool_loop_escaped_exception")
                        continue  # the loop thread must outlive any one tool
                    break
            finally:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        thread = threading.Thread(target=main, name=self.name, daemon=True)
        thread.start()
        if not ready.wait(10):  # pragma: no cover - a thread that cannot start
            raise ToolLoopClosed("the tool event loop did not start")
        self._thread = thread
        return loop

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Await ``closer()`` on the loop when it closes, before its tasks are cancelled."""
        with self._lock:
            self._closers.append(closer)

    def close(self, timeout: float = 5.0) -> bool:
        """Run the closers, cancel every task, stop the loop. True if the thread ended in time."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return True
        done = asyncio.run_coroutine_threadsafe(self._shutdown(timeout), loop)
        try:
            done.result(timeout)
        except Exception as exc:  # a closer past its deadline: the loop stops anyway
            log.warning("tool_loop_shutdown_incomplete", error=repr(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(max(0.1, timeout))
        return not thread.is_alive()

    async def _shutdown(self, timeout: float) -> None:
        with self._lock:
            never_started = list(self._incoming)
            self._incoming.clear()
        for _make, on_done, _cancel in never_started:
            self._report(on_done, None, ToolLoopClosed("the tool event loop shut down"))
        closers, self._closers = self._closers, []
        if closers:
            results = await asyncio.wait(
                [asyncio.ensure_future(closer()) for closer in closers], timeout=timeout / 2
            )
            for task in results[1]:
                task.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout / 4)

    # -- running --------------------------------------------------------------------

    def submit(
        self,
        make: Callable[[], Coroutine[Any, Any, Any]],
        on_done: OnDone,
        *,
        cancel: CancelToken | None = None,
    ) -> None:
        """Run ``make()`` as a task; then ``on_done(result, error)`` on the loop thread.

        ``cancel`` cancels the task when the token is cancelled. Raises
        :class:`ToolLoopClosed` after :meth:`close`; ``on_done`` is called
        exactly once otherwise (with the ``CancelledError`` of a task
        cancelled before or while it ran).
        """
        loop = self.loop()
        with self._lock:
            self._incoming.append((make, on_done, cancel))
            if self._draining:
                return  # the drain already scheduled takes this job too
            self._draining = True
        try:
            # One wake-up per burst: waking the loop writes to its self-pipe,
            # which costs more than starting the task itself.
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # closed between the check and the call
            with self._lock:
                self._draining = False
                self._incoming.clear()
            raise ToolLoopClosed("the tool event loop is shut down") from None

    def _drain(self) -> None:
        with self._lock:
            jobs = list(self._incoming)
            self._incoming.clear()
            self._draining = False
        for make, on_done, cancel in jobs:
            self._start(make, on_done, cancel)

    def _start(
        self,
        make: Callable[[], Coroutine[Any, Any, Any]],
        on_done: OnDone,
        cancel: CancelToken | None,
    ) -> None:
        loop = self._loop
        assert loop is not None  # _start runs on it
        try:
            coroutine = make()
        except BaseException as exc:  # building the coroutine failed: that is the result
            self._report(on_done, None, exc)
            return
        task = loop.create_task(_guarded(coroutine))
        self._tasks.add(task)
        # The token's callback must not keep the task (and through it the
        # call's context and the token itself) alive once the task is done:
        # it reaches the task through a holder emptied at the end.
        holder: list[asyncio.Task[Any]] = [task]
        if cancel is not None:
            cancel.on_cancel(lambda _reason: _cancel_from_any_thread(loop, holder))
        task.add_done_callback(lambda done: self._finished(done, on_done, holder))

    def _finished(
        self, task: asyncio.Task[Any], on_done: OnDone, holder: list[asyncio.Task[Any]]
    ) -> None:
        holder.clear()
        self._tasks.discard(task)
        result: Any = None
        error: BaseException | None = None
        if task.cancelled():
            error = asyncio.CancelledError()
        else:
            error = task.exception()
            if error is None:
                outcome = task.result()
                if isinstance(outcome, _Raised):
                    error = outcome.error
                else:
                    result = outcome
        self._report(on_done, result, error)

    @staticmethod
    def _report(on_done: OnDone, result: Any, error: BaseException | None) -> None:
        try:
            on_done(result, error)
        except Exception:
            log.exception("tool_loop_callback_failed")

    def run_coroutine(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the loop from another thread; its concurrent future."""
        try:
            loop = self.loop()
        except ToolLoopClosed:
            coroutine.close()
            raise
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    @property
    def running(self) -> int:
        """Tasks submitted through :meth:`submit` that have not ended."""
        return len(self._tasks)


class _Raised:
    """A coroutine's ``BaseException``, carried as its task's result (see :func:`_guarded`)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


async def _guarded(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coroutine``, keeping ``KeyboardInterrupt`` / ``SystemExit`` inside the task.

    asyncio re-raises those two out of ``run_forever`` -- one tool raising
    ``SystemExit`` would stop the loop every other async call and MCP
    server runs on. Here they are that call's result, as a thread's are.
    """
    try:
        return await coroutine
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return _Raised(exc)


def _cancel_from_any_thread(
    loop: asyncio.AbstractEventLoop, holder: list[asyncio.Task[Any]]
) -> None:
    def cancel() -> None:
        if holder:
            holder[0].cancel()

    try:
        loop.call_soon_threadsafe(cancel)
    except RuntimeError:  # the loop is closed: its tasks were cancelled with it
        pass


__all__ = ["ToolLoop", "ToolLoopClosed"]
