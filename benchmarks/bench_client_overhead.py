"""The bench client's own timing error: measured token gaps versus the gaps the server actually sent.

A synthetic server (strata_bench.synthetic, its own process) streams N concurrent requests at a known
inter-token latency and stamps every event with its perf_counter send time (`synthetic_t`; perf_counter
is CLOCK_MONOTONIC, shared by processes on Linux). For each consecutive pair of events of a stream:
error = (client's arrival gap) - (server's send gap). Target: |error| within 1 ms at 64 streams.
Also printed, for scale: the server's send gaps versus the nominal ITL (its own jitter), and the floor
this machine sets: one stream read by a plain blocking socket, its gap error and the delay from the
kernel's receive timestamp (SO_TIMESTAMPNS) to user space. On a shared, loaded machine that floor
is itself milliseconds at p99: no user-space client measures better than the scheduler lets it run.

Run: .venv/bin/python benchmarks/bench_client_overhead.py [--streams 64] [--itl-ms 20] [--tokens 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import time

import numpy as np

from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import stream_completion
from strata_bench.engines.http_stream import run
from strata_bench.synthetic.launcher import spawn


def start_server(itl_ms: float, pack: int) -> tuple[subprocess.Popen, str]:
    return spawn("--mode", "free", "--read-ms-per-token", "0", "--itl-ms", str(itl_ms), "--pack", str(pack))


async def measure(url: str, streams: int, tokens: int) -> list[list[tuple[float, float]]]:
    """Per stream: (server send time, client arrival time) of every event."""
    pairs: list[list[tuple[float, float]]] = [[] for _ in range(streams)]

    def hook(i: int):
        def on_event(payload: dict, arrived: float) -> None:
            if isinstance(payload, dict) and "synthetic_t" in payload:
                pairs[i].append((payload["synthetic_t"], arrived))

        return on_event

    results = [StreamResult(name=f"s{i}", role="stream", prompt_tokens=4) for i in range(streams)]
    await asyncio.gather(
        *[
            stream_completion(
                url,
                {"prompt": [i, 1, 2, 3], "max_tokens": tokens, "return_token_ids": True},
                results[i],
                on_event=hook(i),
            )
            for i in range(streams)
        ]
    )
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, first: {errors[0]}")
    return pairs


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export the name


def floor_single_stream(url: str, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """One stream on a blocking socket: |gap error| (ms) and kernel-receive-to-user delay (ms)."""
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"prompt": [7, 8], "max_tokens": tokens, "stream": True}).encode()
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )
    sent_arrived, delays = [], []
    with sock:
        while True:
            data, ancillary, _, _ = sock.recvmsg(65536, 1024)
            wall, mono = time.clock_gettime(time.CLOCK_REALTIME), time.perf_counter()
            if not data:
                break
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    delays.append((wall - (sec + nsec / 1e9)) * 1000)
            at = data.find(b'"synthetic_t": ')
            if at >= 0 and data.count(b"synthetic_t") == 1:  # one event per read: unambiguous
                sent_arrived.append((float(data[at + 15 : data.index(b"}", at)]), mono))
    err = [((a1 - a0) - (s1 - s0)) * 1000 for (s0, a0), (s1, a1) in zip(sent_arrived, sent_arrived[1:])]
    return np.abs(np.array(err)), np.array(delays)


def dist(values: np.ndarray) -> str:
    return "  ".join(f"p{q}={np.percentile(values, q):.3f}" for q in (50, 90, 99)) + f"  max={values.max():.3f}"


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
        floor_err, floor_delay = floor_single_stream(url, args.tokens)
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
    print(
        f"{args.streams} streams x {args.tokens} tokens at {args.itl_ms:g} ms (pack {args.pack}); "
        f"{len(client_err)} gaps, ~{rate:.0f} events/s into the client"
    )
    print(f"|client gap - server gap| (ms):    {dist(err)}  within 1 ms: {100 * np.mean(err <= 1.0):.2f}%")
    print(f"|server gap - nominal| (ms):       {dist(jit)}  (the synthetic server's own jitter)")
    print(f"floor, 1 blocking stream (ms):     {dist(floor_err)}  within 1 ms: {100 * np.mean(floor_err <= 1.0):.2f}%")
    print(f"floor, kernel rx -> user (ms):     {dist(floor_delay)}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(
        json.dumps(
            {
                "streams": args.streams,
                "itl_ms": args.itl_ms,
                "gaps": len(client_err),
                "client_err_ms": {f"p{q}": round(float(np.percentile(err, q)), 4) for q in (50, 90, 99, 100)},
                "within_1ms": round(float(np.mean(err <= 1.0)), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
