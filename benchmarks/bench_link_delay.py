"""Benchmark (not a test): what a slow link between stage ranks costs, measured with an artificial delay.

Stage rank 2 runs in its own network namespace joined by a veth pair; `tc netem` delays every packet on
both ends by D ms, so the links rank 1 -> rank 2 and rank 2 -> head each gain D ms one way. For each D:
the decode rate of batch 4 in 1 and 2 groups on 2 stage ranks, and the round trip of one lone decode
micro-batch. Needs root, `ip netns` and `tc`. Raw numbers go to --json.
Usage: .venv/bin/python benchmarks/bench_link_delay.py [--delays-ms 0,1,5] [--tokens 48] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from strata_engine import Engine, SamplingParams
from strata_engine.runtime.pipeline import MicroBatch, Part

STAGE = [str(Path(sys.executable).parent / "strata-engine"), "stage"]
NS, HOST_DEV, NS_DEV, HOST_ADDR = "stratabench", "stbh", "stbn", "10.213.9.1"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def set_up(delay_ms: float) -> None:
    ip("netns", "add", NS)
    ip("link", "add", HOST_DEV, "type", "veth", "peer", "name", NS_DEV)
    ip("link", "set", NS_DEV, "netns", NS)
    ip("addr", "add", f"{HOST_ADDR}/24", "dev", HOST_DEV)
    ip("link", "set", HOST_DEV, "up")
    for args in (
        ("addr", "add", "10.213.9.2/24", "dev", NS_DEV),
        ("link", "set", NS_DEV, "up"),
        ("link", "set", "lo", "up"),
    ):
        ip("netns", "exec", NS, "ip", *args)
    if delay_ms > 0:
        done = subprocess.run(
            ["tc", "qdisc", "add", "dev", HOST_DEV, "root", "netem", "delay", f"{delay_ms}ms"],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            tear_down()
            raise SystemExit(f"tc netem is not available here ({done.stderr.strip()}): only --delays-ms 0 can run")
        ip("netns", "exec", NS, "tc", "qdisc", "add", "dev", NS_DEV, "root", "netem", "delay", f"{delay_ms}ms")


def tear_down() -> None:
    subprocess.run(["ip", "link", "del", HOST_DEV], capture_output=True)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def measure(groups: int, tokens: int) -> tuple[float, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": HOST_ADDR, "MASTER_PORT": str(port), "WORLD_SIZE": "3"}
    procs = [
        subprocess.Popen(STAGE, env={**env, "RANK": "1", "GLOO_SOCKET_IFNAME": HOST_DEV}),
        subprocess.Popen(["ip", "netns", "exec", NS, *STAGE], env={**env, "RANK": "2", "GLOO_SOCKET_IFNAME": NS_DEV}),
    ]
    os.environ.update(
        {
            **{k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")},
            "RANK": "0",
            "GLOO_SOCKET_IFNAME": HOST_DEV,
        }
    )
    try:
        with Engine.from_pretrained(
            batch=4, batch_groups=groups, split=2, log_events=False, stage_workers="dist", stage_ranks="join", threads=1
        ) as engine:
            pipeline = engine.executor.pipeline
            trips = []
            for i in range(30):
                part = Part(torch.full((2, 1), 7), torch.full((2, 1), 1 + i), torch.arange(2), True)
                t0 = time.perf_counter()
                pipeline.submit(MicroBatch([part]))
                pipeline.get()
                trips.append((time.perf_counter() - t0) * 1e3)
            done: list[float] = []
            prompts = [f"def function_{i}(value):\n    " for i in range(4)]
            handles = [
                engine.submit(
                    p,
                    SamplingParams(max_tokens=tokens, ignore_eos=True),
                    on_output=lambda item: done.append(getattr(item, "t", None)),
                )
                for p in prompts
            ]
            for h in handles:
                h.result()
        times = sorted(t for t in done if t is not None)
        rate = (len(times) - 4) / (times[-1] - times[3])
        return rate, statistics.median(trips[5:])
    finally:
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays-ms", default="0,1,5")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    raw = []
    for delay in [float(d) for d in args.delays_ms.split(",")]:
        tear_down()
        try:
            set_up(delay)
            for groups in (1, 2):
                rate, trip = measure(groups, args.tokens)
                raw.append({"delay_ms": delay, "groups": groups, "tok_s": rate, "lone_round_trip_ms": trip})
                print(
                    f"delay {delay:g} ms per link crossing: {groups} group(s) {rate:.1f} tok/s, "
                    f"a lone micro-batch's round trip {trip:.1f} ms",
                    flush=True,
                )
        finally:
            tear_down()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
