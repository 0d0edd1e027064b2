"""The bench client's own timing error: measured token gaps versus the gaps the server actually sent.

A synthetic server (strata_bench.synthetic, its own process) streams N concurrent requests at a known
inter-token latency and stamps every event with its perf_counter send time (`synthetic_t`; perf_counter
is CLOCK_MONOTONIC, shared by processes on Linux). For each consecutive pair of events of a stream:
error = (client's arrival gap) - (server's send gap). Target: |error| within 1 ms at 64 streams.
Also printed: the server's send gaps versus the nominal ITL (the server's own jitter, not the client's).

Run: .venv/bin/python benchmarks/bench_client_overhead.py [--streams 64] [--itl-ms 20] [--tokens 200]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

import httpx
import numpy as np

from strata_bench.client import RequestResult, stream_completion
from strata_bench.http_stream import run
from strata_bench.launcher import free_port


def start_server(itl_ms: float, pack: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "strata_bench.synthetic", "--port", str(port), "--mode", "free",
                             "--read-ms-per-token", "0", "--itl-ms", str(itl_ms), "--pack", str(pack)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the synthetic server did not start")


async def measure(url: str, streams: int, tokens: int) -> list[list[tuple[float, float]]]:
    """Per stream: (server send time, client arrival time) of every event."""
    pairs: list[list[tuple[float, float]]] = [[] for _ in range(streams)]

    def hook(i: int):
        def on_event(payload: dict, arrived: float) -> None:
            if isinstance(payload, dict) and "synthetic_t" in payload:
                pairs[i].append((payload["synthetic_t"], arrived))
        return on_event

    results = [RequestResult(name=f"s{i}", role="stream", prompt_tokens=4) for i in range(streams)]
    await asyncio.gather(*[
        stream_completion(url, {"prompt": [i, 1, 2, 3], "max_tokens": tokens, "return_token_ids": True},
                          results[i], on_event=hook(i))
        for i in range(streams)
    ])
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, first: {errors[0]}")
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--pack", type=int, default=1)
    args = parser.parse_args()
    proc, url = start_server(args.itl_ms, args.pack)
    try:
        pairs = run(measure(url, args.streams, args.tokens))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    client_err, server_jitter = [], []
    for events in pairs:
        for (s0, a0), (s1, a1) in zip(events, events[1:]):
            client_err.append(((a1 - a0) - (s1 - s0)) * 1000)
            server_jitter.append(((s1 - s0) * 1000) - args.itl_ms * args.pack)
    err, jit = np.abs(np.array(client_err)), np.abs(np.array(server_jitter))
    rate = len(client_err) / max(1e-9, max(a for e in pairs for _, a in e) - min(a for e in pairs for _, a in e))
    print(f"{args.streams} streams x {args.tokens} tokens at {args.itl_ms:g} ms (pack {args.pack}); "
          f"{len(client_err)} gaps, ~{rate:.0f} events/s into the client")
    print("|client gap - server gap| (ms): " + "  ".join(f"p{q}={np.percentile(err, q):.3f}" for q in (50, 90, 99))
          + f"  max={err.max():.3f}  within 1 ms: {100 * np.mean(err <= 1.0):.2f}%")
    print("|server gap - nominal| (ms):    " + "  ".join(f"p{q}={np.percentile(jit, q):.3f}" for q in (50, 90, 99))
          + f"  max={jit.max():.3f}  (the synthetic server's own jitter, for scale)")
    print(json.dumps({"streams": args.streams, "itl_ms": args.itl_ms, "gaps": len(client_err),
                      "client_err_ms": {f"p{q}": round(float(np.percentile(err, q)), 4) for q in (50, 90, 99, 100)},
                      "within_1ms": round(float(np.mean(err <= 1.0)), 5)}))


if __name__ == "__main__":
    main()
