"""LLM gateway vs bare httpx.AsyncClient against the mock server, in one run.

The mock server runs in a child process (its own GIL). Measured:

* N concurrent streaming requests (default 1,000) through the gateway actor and
  its event loop vs the same load with bare ``httpx.AsyncClient`` doing the
  same SSE parsing: throughput ratio (target >= 0.8) and added latency. Two
  bare baselines, both printed with their ratio:

  - **same transport** (the ratio the target applies to): ``httpx.AsyncClient``
    on the transport the gateway itself uses (aiohttp under httpx,
    :class:`~actors.llm.netio.FastAsyncTransport`), so the ratio isolates the
    gateway's own overhead -- actor hops, the loop, coalescing;
  - **stock httpx** (httpcore/h11): what a plain ``httpx.AsyncClient`` would
    do. The gateway may beat it, thanks to the faster transport, not to
    anything the gateway does.

  Both shard their connections over as many clients as the gateway does
  (httpcore scans its whole pool for every request, so one 4,096-slot pool
  is slower, and a ratio against it would measure sharding, not the
  gateway); the single stock client is printed too, for reference;
* cancel-to-closed latency: from telling the gateway to cancel a live stream to
  the requester's ``LlmCancelled`` (sent after the connection is closed).

Run: ``fore bench llm`` (or ``python -m bench.llm [--quick] [--requests N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
import zlib
from typing import Any

import httpx
from httpx_sse import EventSource

from actors.core import ActorSystem, PooledActor
from actors.llm import LlmGateway, LlmLoop, OpenAICompatible, RetryPolicy
from actors.llm.mock_server import MockLlmServer
from actors.llm.netio import FastAsyncTransport
from bench._common import Target, console, machine_line, percentile, ratio, table, targets_table
from messages.conversation import UserMessage
from messages.llm import (
    CancelLlmRequest,
    LlmCancelled,
    LlmCompleted,
    LlmFailed,
    LlmRequest,
    LlmTextDelta,
)

_ids = itertools.count()
SHARDS = 64
"""Client shards of the gateway's loop, and of the bare baseline."""
MAX_CONNECTIONS = 4096


class _Collector(PooledActor):
    def __init__(self, expected: int) -> None:
        super().__init__()
        self.expected = expected
        self.done = threading.Event()
        self.finished_at: dict[str, float] = {}
        self.failures = 0
        self.first_delta: dict[str, threading.Event] = {}
        self.cancelled_at: dict[str, float] = {}

    def reset(self, expected: int) -> None:
        self.expected = expected
        self.done.clear()
        self.finished_at.clear()

    def on_receive(self, message: Any) -> None:
        if isinstance(message, LlmTextDelta):
            event = self.first_delta.get(message.request_id)
            if event is not None:
                event.set()
        elif isinstance(message, LlmCancelled):
            self.cancelled_at[message.request_id] = time.perf_counter()
        elif isinstance(message, LlmCompleted | LlmFailed):
            if isinstance(message, LlmFailed):
                self.failures += 1
            self.finished_at[message.request_id] = time.perf_counter()
            if len(self.finished_at) >= self.expected:
                self.done.set()


def _gateway_round(
    gateway: Any, collector_ref: Any, collector: _Collector, model: Any, n: int
) -> tuple[float, list[float]]:
    collector.reset(n)
    sent: dict[str, float] = {}
    start = time.perf_counter()
    for _ in range(n):
        rid = f"g{next(_ids)}"
        sent[rid] = time.perf_counter()
        gateway.tell(
            LlmRequest(
                request_id=rid,
                session_id=f"s{rid}",
                messages=(UserMessage(text="hello"),),
                model=model,
                reply_to=collector_ref,
            )
        )
    if not collector.done.wait(300):
        raise RuntimeError("gateway round did not finish")
    wall = time.perf_counter() - start
    latencies = [collector.finished_at[r] - t for r, t in sent.items()]
    return wall, latencies


def _bare_round(
    base_url: str, n: int, shards: int, *, same_transport: bool = False
) -> tuple[float, list[float]]:
    """The same load on bare httpx: same body, headers, pools and SSE parsing as the gateway.

    ``same_transport``: on the gateway's own transport (aiohttp under httpx)
    instead of httpx's stock httpcore/h11 one.
    """

    async def main() -> tuple[float, list[float]]:
        per_shard = max(1, MAX_CONNECTIONS // shards)
        limits = httpx.Limits(
            max_connections=per_shard, max_keepalive_connections=min(per_shard, 64)
        )
        tls = httpx.create_ssl_context()  # as the gateway: the CA bundle is loaded once
        clients = [
            httpx.AsyncClient(
                verify=tls,
                limits=limits,
                timeout=httpx.Timeout(60.0),
                transport=FastAsyncTransport(verify=tls, limits=limits) if same_transport else None,
            )
            for _ in range(shards)
        ]

        async def one(i: int) -> float:
            t0 = time.perf_counter()
            session = f"b{i}"
            body = {
                "model": "mock",
                "messages": [{"role": "user", "content": "hello"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            headers = {
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                "Authorization": "Bearer bench",
                "X-Fore-Session": session,
                "X-Fore-Purpose": "main",
                "X-Fore-Request-Id": f"bare-{i}",
            }
            client = clients[zlib.crc32(session.encode()) % shards]
            async with client.stream(
                "POST",
                f"{base_url}/chat/completions",
                content=json.dumps(body).encode(),
                headers=headers,
            ) as response:
                text = []
                async for sse in EventSource(response).aiter_sse():
                    if sse.data.strip() == "[DONE]":
                        continue  # read to the end so the connection is reused
                    chunk = json.loads(sse.data)
                    for choice in chunk.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            text.append(content)
            return time.perf_counter() - t0

        try:
            start = time.perf_counter()
            latencies = await asyncio.gather(*(one(i) for i in range(n)))
            return time.perf_counter() - start, list(latencies)
        finally:
            for client in clients:
                await client.aclose()

    return asyncio.run(main())


def run(*, quick: bool = False, requests: int | None = None) -> dict[str, float]:
    n = requests or (200 if quick else 1000)
    cancels = 30 if quick else 100
    console.print(f"[bold]bench llm[/] — {machine_line()}")
    server = MockLlmServer.spawn(ttft_ms=20, generated_words=50)
    system = ActorSystem(name="bench-llm")
    loop = LlmLoop(max_connections=MAX_CONNECTIONS, client_shards=SHARDS)
    try:
        model = OpenAICompatible(
            base_url=server.base_url,
            api_key="bench",
            model="mock",
            retry=RetryPolicy(max_retries=0),
        )
        slow = OpenAICompatible(
            base_url=server.base_url,
            api_key="bench",
            model="mock",
            headers={"X-Mock-Tokens-Per-S": "5"},
            retry=RetryPolicy(max_retries=0),
        )
        with system.activated():
            collector_ref = _Collector.start(n)
            collector = collector_ref._actor_weakref()
            assert collector is not None
            gateway = LlmGateway.start(loop)
            # warm both paths (connections, imports, JIT-free caches)
            _gateway_round(gateway, collector_ref, collector, model, min(100, n))
            _bare_round(server.base_url, min(100, n), SHARDS)
            _bare_round(server.base_url, min(100, n), SHARDS, same_transport=True)
            bare_runs = []
            same_runs = []
            gate_runs = []
            for _ in range(1 if quick else 2):  # interleaved, so drift hits all alike
                bare_runs.append(_bare_round(server.base_url, n, SHARDS))
                same_runs.append(_bare_round(server.base_url, n, SHARDS, same_transport=True))
                gate_runs.append(_gateway_round(gateway, collector_ref, collector, model, n))
            bare_wall, bare_lat = min(bare_runs, key=lambda r: r[0])
            same_wall, same_lat = min(same_runs, key=lambda r: r[0])
            gate_wall, gate_lat = min(gate_runs, key=lambda r: r[0])
            single_wall, single_lat = _bare_round(server.base_url, n, 1)

            cancel_latencies = []
            for _ in range(cancels):
                rid = f"c{next(_ids)}"
                first = threading.Event()
                collector.first_delta[rid] = first
                gateway.tell(
                    LlmRequest(
                        request_id=rid,
                        session_id=rid,
                        messages=(UserMessage(text="hello"),),
                        model=slow,
                        reply_to=collector_ref,
                    )
                )
                if not first.wait(30):
                    raise RuntimeError("slow stream never started")
                t0 = time.perf_counter()
                gateway.tell(CancelLlmRequest(request_id=rid))
                deadline = time.monotonic() + 10
                while rid not in collector.cancelled_at:
                    if time.monotonic() > deadline:
                        raise RuntimeError("cancel was not acknowledged")
                    time.sleep(0.0002)
                cancel_latencies.append(collector.cancelled_at[rid] - t0)
            failures = collector.failures
    finally:
        loop.close()
        system.shutdown()
        server.stop()

    throughput_ratio = ratio(same_wall, gate_wall)
    stock_ratio = ratio(bare_wall, gate_wall)
    table(
        f"{n:,} concurrent streaming requests (50 words each, ttft 20 ms)",
        ["path", "wall (s)", "throughput (req/s)", "latency p50 (ms)", "latency p99 (ms)"],
        [
            [
                "bare httpx, one AsyncClient (reference)",
                single_wall,
                n / single_wall,
                percentile(single_lat, 50) * 1e3,
                percentile(single_lat, 99) * 1e3,
            ],
            [
                f"bare httpx, {SHARDS} AsyncClients, stock transport",
                bare_wall,
                n / bare_wall,
                percentile(bare_lat, 50) * 1e3,
                percentile(bare_lat, 99) * 1e3,
            ],
            [
                f"bare httpx, {SHARDS} AsyncClients, gateway's transport (baseline)",
                same_wall,
                n / same_wall,
                percentile(same_lat, 50) * 1e3,
                percentile(same_lat, 99) * 1e3,
            ],
            [
                "gateway actor + loop",
                gate_wall,
                n / gate_wall,
                percentile(gate_lat, 50) * 1e3,
                percentile(gate_lat, 99) * 1e3,
            ],
        ],
    )
    added = (sum(gate_lat) / len(gate_lat)) - (sum(same_lat) / len(same_lat))
    added_stock = (sum(gate_lat) / len(gate_lat)) - (sum(bare_lat) / len(bare_lat))
    table(
        "ratios and cancellation",
        ["measurement", "value", "target"],
        [
            ["throughput gateway / bare, same transport (×)", throughput_ratio, "≥ 0.8×"],
            ["throughput gateway / bare, stock httpx (×)", stock_ratio, ""],
            ["throughput gateway / one stock bare client (×)", ratio(single_wall, gate_wall), ""],
            ["added mean latency vs same transport (ms)", added * 1e3, ""],
            ["added mean latency vs stock httpx (ms)", added_stock * 1e3, ""],
            ["failed requests (count)", float(failures), "0"],
            ["cancel → closed p50 (ms)", percentile(cancel_latencies, 50) * 1e3, ""],
            ["cancel → closed p99 (ms)", percentile(cancel_latencies, 99) * 1e3, "≤ 5 ms"],
        ],
    )
    targets_table(
        [
            Target("throughput gateway / bare, same transport", throughput_ratio, "×", ">=", 0.8),
            Target("failed requests", float(failures), "", "==", 0),
            Target("cancel → closed, p99", percentile(cancel_latencies, 99) * 1e3, "ms", "<=", 5),
        ]
    )
    return {
        "requests": float(n),
        "throughput_ratio": throughput_ratio,
        "throughput_ratio_stock_httpx": stock_ratio,
        "gateway_req_per_s": n / gate_wall,
        "bare_same_transport_req_per_s": n / same_wall,
        "bare_req_per_s": n / bare_wall,
        "bare_single_client_req_per_s": n / single_wall,
        "added_latency_ms": added * 1e3,
        "added_latency_stock_httpx_ms": added_stock * 1e3,
        "cancel_p50_ms": percentile(cancel_latencies, 50) * 1e3,
        "cancel_p99_ms": percentile(cancel_latencies, 99) * 1e3,
        "failures": float(failures),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench llm", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument(
        "--requests", type=int, default=None, help="concurrent requests (default 1000)"
    )
    args = parser.parse_args(argv)
    run(quick=args.quick, requests=args.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
