"""The caller's end of ``RemoteSession.forward_events``: shard streams pumped to local addresses.

A session's events leave its shard through a Ray streaming generator
(:mod:`fore.distributed.events`). A reader that wants them delivered -- an
actor of the caller's process, a queue -- instead of iterating them itself is
served here: one asyncio loop thread per runtime (started with the first
forward) awaits every forwarded session's stream and ``tell``\\ s each event
to its address, in order. A session whose shard died is followed to the
shard it moves to (the runtime's move, then a new stream from there); the
pump ends when the session closes, the runtime closes, or the address is
gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

from fore.distributed import calls
from fore.distributed.calls import _Died, _NotHere

if TYPE_CHECKING:
    from fore.distributed.runtime import RayRuntime
    from fore.distributed.session import RemoteSession

__all__ = ["EventForwarder"]


class EventForwarder:
    """The runtime's event-forwarding loop (module docs)."""

    def __init__(self, runtime: RayRuntime, name: str) -> None:
        self._runtime = runtime
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pumps: dict[str, concurrent.futures.Future[None]] = {}

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def start(self, session: RemoteSession, address: Any, kinds: tuple[str, ...] | None) -> None:
        """Deliver ``session``'s events (of ``kinds``, or all) to ``address.tell``."""
        loop = self._event_loop()
        future = asyncio.run_coroutine_threadsafe(self._pump(session, address, kinds), loop)
        self._pumps[session.id] = future

    def stop(self, session_id: str) -> None:
        """Stop forwarding a session's events (it closed here)."""
        future = self._pumps.pop(session_id, None)
        if future is not None:
            future.cancel()

    async def _pump(
        self, session: RemoteSession, address: Any, kinds: tuple[str, ...] | None
    ) -> None:
        """One session's events to ``address``, following the session when it moves."""
        runtime = self._runtime
        while not session.closed and not runtime.closed:
            placement = await asyncio.to_thread(runtime._ensure_placed, session)
            generator = placement.handle.events.remote(session.id, kinds)
            try:
                async for ref in generator:
                    for event in await calls.aresult(ref):
                        try:
                            address.tell(event)
                        except Exception:  # the reader is gone
                            return
                return  # the session closed on its shard
            except _NotHere:
                runtime._session_lost(session, placement, "its shard was restarted")
            except _Died:
                runtime._shard_died(placement)
            except asyncio.CancelledError:
                return
            await asyncio.sleep(runtime.health_interval)

    def close(self, timeout: float) -> bool:
        """Stop every pump and the loop's thread; whether the thread ended in time."""
        for future in list(self._pumps.values()):
            future.cancel()
        self._pumps.clear()
        if self._loop is None:
            return True
        self._loop.call_soon_threadsafe(self._loop.stop)
        clean = True
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            clean = not self._thread.is_alive()
        if not self._loop.is_running():
            self._loop.close()
        return clean
