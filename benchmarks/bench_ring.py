#!/usr/bin/env python
"""Why pipelined groups on stage ranks fall short of 2x: the ring's own timings (a diagnostic, not a race).

For 1, 2 and 3 groups of --batch streams each, on 2 stages (--stage-workers), it decodes and prints:
the aggregate decode rate, each stage's compute per micro-batch, a micro-batch's trip (submit to
result), the head's time from a result to its next submit, and the CPU share of the head and of each
stage rank (from /proc/<pid>/stat, from 0.3 s after the streams are sent to their end). Then the engine's start and stop times, and
how much two single-threaded GEMM loops in separate processes slow each other on this machine.

  .venv/bin/python benchmarks/bench_ring.py --stage-workers dist --tokens 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from strata_engine import Engine, SamplingParams

GEMM_LOOP = (
    "import time, torch; torch.set_num_threads(1); a, w = torch.randn(16, 256), torch.randn(2048, 256)\n"
    "for _ in range(100): torch.nn.functional.linear(a, w)\n"
    "t, n = time.perf_counter(), 0\n"
    "while time.perf_counter() - t < 2: torch.nn.functional.linear(a, w); n += 1\n"
    "print((time.perf_counter() - t) / n * 1e6)"
)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return sorted(int(x) for x in out)


def ring(groups: int, batch: int, tokens: int, workers: str) -> dict:
    with Engine.from_pretrained(
        batch=groups * batch, batch_groups=groups, split=2, log_events=False, stage_workers=workers
    ) as engine:
        engine.generate(["x"] * 2, SamplingParams(max_tokens=4, ignore_eos=True))
        pipe, log = engine.executor.pipeline, []
        get, submit = pipe.get, pipe.submit

        def timed_get():
            mb = get()
            log.append(("get", time.perf_counter(), mb.stage_ms))
            return mb

        def timed_submit(mb):
            log.append(("submit", time.perf_counter(), None))
            return submit(mb)

        pipe.get, pipe.submit = timed_get, timed_submit
        pids = [os.getpid(), *children(os.getpid())]
        handles = [
            engine.submit(f"def f{i}():", SamplingParams(max_tokens=tokens, ignore_eos=True))
            for i in range(groups * batch)
        ]
        time.sleep(0.3)  # past the streams' own reads
        cpu0, t0 = [cpu_seconds(p) for p in pids], time.perf_counter()
        for h in handles:  # every stream decodes the same length: they end together
            h.result()
        shares = [(cpu_seconds(p) - c) / (time.perf_counter() - t0) for p, c in zip(pids, cpu0)]
        pipe.get, pipe.submit = get, submit
    steady = log[len(log) // 3 : 2 * len(log) // 3]
    gets = [e for e in steady if e[0] == "get"]
    sent, trips = [], []
    for kind, t, _ in steady:  # results come back in submission order
        if kind == "submit":
            sent.append(t)
        elif sent:
            trips.append(t - sent.pop(0))
    head = [b[1] - a[1] for a, b in zip(steady, steady[1:]) if a[0] == "get" and b[0] == "submit"]
    stage_ms = [statistics.median(g[2][i] for g in gets if g[2]) for i in range(2)] if any(g[2] for g in gets) else []
    rate = (len(gets) - 1) / (gets[-1][1] - gets[0][1]) * batch
    return {
        "tok_s": rate,
        "stage_ms": stage_ms,
        "trip_ms": statistics.median(trips) * 1e3,
        "head_ms": statistics.median(head) * 1e3,
        "cpu": shares,
    }


def start_stop(workers: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    engine = Engine.from_pretrained(batch=4, batch_groups=2, split=2, log_events=False, stage_workers=workers)
    t1 = time.perf_counter()
    engine.shutdown()
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage-workers", default="dist")
    ap.add_argument("--batch", type=int, default=4, help="streams per group")
    ap.add_argument("--tokens", type=int, default=200, help="decode tokens per stream")
    args = ap.parse_args()
    one = None
    for groups in (1, 2, 3):
        r = ring(groups, args.batch, args.tokens, args.stage_workers)
        one = one or r["tok_s"]
        stages = ", ".join(f"{ms:.2f}" for ms in r["stage_ms"]) or "n/a (thread stages report none)"
        print(
            f"{groups} group(s) of {args.batch}: {r['tok_s']:.0f} tok/s ({r['tok_s'] / one:.2f}x); stage compute ms [{stages}]; "
            f"trip {r['trip_ms']:.1f} ms; head result->submit {r['head_ms']:.2f} ms; "
            f"CPU share head {r['cpu'][0]:.2f}, stage ranks {[round(c, 2) for c in r['cpu'][1:]]}"
        )
    for workers in ("thread", "dist"):
        start, stop = start_stop(workers)
        print(f"{workers} stages: start {start:.2f} s, stop {stop:.2f} s")
    alone = float(subprocess.run([sys.executable, "-c", GEMM_LOOP], capture_output=True, text=True, check=True).stdout)
    pair = [subprocess.Popen([sys.executable, "-c", GEMM_LOOP], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    both = [float(p.communicate()[0]) for p in pair]
    print(
        f"a 16x256x2048 GEMM loop, one thread: {alone:.0f} µs alone, {both[0]:.0f} / {both[1]:.0f} µs with a second "
        f"beside it ({max(both) / alone - 1:+.0%})"
    )


if __name__ == "__main__":
    main()
