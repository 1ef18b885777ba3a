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
* cancel-to-closed latency: from cancelling a live stream's scope to
  the requester's ``LlmCancelled`` (sent after the connection is closed);
* what a fork's answer costs this process (CPU per answer; forks are streamed so
  that an abort stops the server): not streamed (the baseline), streamed and
  read per event (a main turn), streamed and read in batches (a fork);
* hostile servers (:mod:`bench.llm_hostile`): the peak RSS a client process
  gains from one request to each (a 300 MB line, gzip bombs on a stream, an
  error body and a whole body, a million tool calls), measured in a fresh
  process per case against the limit (64 MB), with an ordinary answer's
  growth in the same run as the baseline.

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

from fore.actors.core import ActorSystem, PooledActor
from fore.actors.llm import LlmGateway, LlmLoop, OpenAICompatible, RetryPolicy
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.netio import FastAsyncTransport
from fore.bench._common import (
    Target,
    console,
    machine_line,
    percentile,
    ratio,
    table,
    targets_table,
)
from fore.messages.conversation import UserMessage
from fore.messages.llm import (
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


def _fork_cpu(quick: bool) -> dict[str, float]:
    """CPU of this process per answer: not streamed vs streamed (per event / in batches).

    The same 150-word answers at 400 tokens/s from a mock server in its own
    process, ``n`` at once, each arm three times, interleaved; the least CPU of
    each arm is kept (``time.process_time``: every thread of this process).
    """
    from fore.actors.llm import evloop

    n = 100 if quick else 200
    server = MockLlmServer.spawn(generated_words=150, tokens_per_s=400, ttft_ms=40)
    try:
        model = OpenAICompatible(
            base_url=server.base_url, api_key="bench", model="mock", retry=RetryPolicy(0)
        )

        def arm(stream: bool, purpose: str) -> float:
            async def one(i: int, http: httpx.AsyncClient) -> None:
                request = LlmRequest(
                    request_id=f"f{next(_ids)}",
                    session_id=f"f{i}",
                    purpose=purpose,
                    messages=(UserMessage(text=f"hello {i}"),),
                    stream=stream,
                    stream_deltas=False,
                )
                await model.stream(request, lambda event: None, http)

            async def go() -> float:
                limits = httpx.Limits(max_connections=4 * n)
                async with httpx.AsyncClient(
                    transport=FastAsyncTransport(limits=limits), timeout=120
                ) as http:
                    began = time.process_time()
                    await asyncio.gather(*(one(i, http) for i in range(n)))
                    return time.process_time() - began

            return evloop.run(go())

        arms = {
            "not streamed (baseline)": (False, "speculation"),
            "streamed, read per event (a main turn)": (True, "main"),
            "streamed, read in batches (a fork)": (True, "speculation"),
        }
        for stream, purpose in arms.values():  # warm up
            arm(stream, purpose)
        cpu: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(3):
            for name, (stream, purpose) in arms.items():
                cpu[name].append(arm(stream, purpose))
    finally:
        server.stop()
    base = min(cpu["not streamed (baseline)"])
    table(
        f"what a fork's answer costs this process ({n} answers of 150 words at once, "
        "least of 3 runs)",
        ["answer read", "CPU ms per answer", "ratio to not streamed"],
        [[name, min(v) / n * 1e3, ratio(min(v), base)] for name, v in cpu.items()],
    )
    return {
        "fork_cpu_ms_not_streamed": base / n * 1e3,
        "fork_cpu_ratio_per_event": ratio(min(cpu["streamed, read per event (a main turn)"]), base),
        "fork_cpu_ratio_batched": ratio(min(cpu["streamed, read in batches (a fork)"]), base),
    }


HOSTILE_RSS_LIMIT = 64 * 1024 * 1024
"""The most one hostile answer may add to a client's peak RSS."""


def _hostile_rss() -> dict[str, float]:
    """Peak RSS growth of a fresh client process under each hostile answer (module docs)."""
    import subprocess
    import sys
    from pathlib import Path

    from fore.bench._common import BenchFailed
    from fore.bench.llm_hostile import BENIGN, CASES, HostileServer

    root = str(Path(__file__).resolve().parents[1])
    cases = [c for c in CASES.values() if not c.timed]
    rows = []
    results: dict[str, float] = {}
    over = []
    with HostileServer(BENIGN) as benign:
        for case in cases:
            with HostileServer(case) as server:
                done = subprocess.run(
                    [sys.executable, "-m", "fore.bench.llm_hostile", server.base_url,
                     benign.base_url, "stream" if case.stream else "body"],
                    capture_output=True, text=True, timeout=300, cwd=root, check=False,
                )  # fmt: skip
            if done.returncode != 0:
                raise BenchFailed(f"hostile case {case.name}: the probe failed: {done.stderr}")
            found = json.loads(done.stdout.strip().splitlines()[-1])
            growth = float(found["growth"])
            results[case.name] = growth / 1e6
            if growth > HOSTILE_RSS_LIMIT:
                over.append(case.name)
            outcome = str(found["outcome"])
            rows.append(
                [
                    case.what,
                    growth / 1e6,
                    growth / HOSTILE_RSS_LIMIT,
                    float(found["seconds"]),
                    outcome if len(outcome) <= 70 else outcome[:67] + "...",
                ]
            )
    table(
        f"hostile servers: peak RSS growth of a client process (limit "
        f"{HOSTILE_RSS_LIMIT // 2**20} MiB; 'benign' is the same-run baseline)",
        ["answer", "growth (MB)", "growth / limit (×)", "time (s)", "how the request ended"],
        rows,
    )
    if over:
        raise BenchFailed(f"hostile answers grew the client past the limit: {', '.join(over)}")
    return results


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
                request = LlmRequest(
                    request_id=rid,
                    session_id=rid,
                    messages=(UserMessage(text="hello"),),
                    model=slow,
                    reply_to=collector_ref,
                )
                gateway.tell(request)
                if not first.wait(30):
                    raise RuntimeError("slow stream never started")
                t0 = time.perf_counter()
                request.scope.cancel("bench")
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
    forks = _fork_cpu(quick)
    hostile = _hostile_rss()
    return {
        **forks,
        **{f"hostile_rss_mb_{name}": value for name, value in hostile.items()},
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
