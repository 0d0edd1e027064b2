"""Benchmark (not a test): what the HTTP layer costs. Tokens/s delivered to N streaming HTTP clients vs
the engine's own rate through the Python API, same engine, same requests, in one run (target >= 90%).

One engine runs in this process; the server (uvicorn, the real app) runs in a thread of this process
over that same engine, so every cost it adds (JSON, SSE, the event loop, the GIL) lands on the engine.
The HTTP clients run in a separate process, as real clients would. Rounds alternate API, HTTP, HTTP,
API, ... (ABBA) so drift hits both arms alike. Raw runs go to JSON first; the table is rendered from it.

Usage:
  .venv/bin/python benchmarks/bench_http_overhead.py [--clients 8] [--max-tokens 256] [--rounds 4]
        [--executor sim --time-scale 20] [--out bench-out/http_overhead.json]
  .venv/bin/python benchmarks/bench_http_overhead.py --render bench-out/http_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TARGET = 0.90


# ---- the client process --------------------------------------------------------------------------
async def _stream(client, url: str, prompt: str, max_tokens: int) -> dict:
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
    }
    tokens, first, last = 0, None, None
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                n = sum(len(c.get("token_ids", [])) for c in event["choices"])
                if n:
                    tokens += n
                    last = time.perf_counter()
                    first = first or last
    return {"tokens": tokens, "first": first, "last": last}


async def _client_round(job: dict) -> dict:
    import httpx

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=256)) as client:
        await client.get(job["url"] + "/health")  # connections warm, not counted
        start, cpu = time.perf_counter(), time.process_time()
        results = await asyncio.gather(*(_stream(client, job["url"], p, job["max_tokens"]) for p in job["prompts"]))
    tokens = sum(r["tokens"] for r in results)
    end = max(r["last"] for r in results)
    # A client process that is busy most of the run may itself be what limits the rate.
    return {
        "tokens": tokens,
        "seconds": end - start,
        "client_cpu_share": (time.process_time() - cpu) / (end - start),
        "ttft_median": statistics.median(r["first"] - start for r in results),
    }


def client_main() -> None:
    """Read one JSON job per stdin line, answer one JSON result per stdout line."""
    for line in sys.stdin:
        result = asyncio.run(_client_round(json.loads(line)))
        print(json.dumps(result), flush=True)


# ---- the engine process --------------------------------------------------------------------------
def api_round(engine, prompts: list[str], max_tokens: int) -> dict:
    from strata_engine.params import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    last = [0.0]
    first: dict[int, float] = {}
    done = threading.Event()
    remaining = [len(prompts)]
    lock = threading.Lock()

    def on_output(item, i: int) -> None:  # delivered on the engine thread, as the server's relay is
        if hasattr(item, "completion"):
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()
        else:
            last[0] = time.perf_counter()
            first.setdefault(i, last[0])

    start = time.perf_counter()
    handles = [engine.submit(p, params, on_output=lambda item, i=i: on_output(item, i)) for i, p in enumerate(prompts)]
    done.wait()
    tokens = sum(len(h.result().token_ids) for h in handles)
    return {
        "tokens": tokens,
        "seconds": last[0] - start,
        "ttft_median": statistics.median(t - start for t in first.values()),
    }


def run(args: argparse.Namespace) -> dict:
    from strata_engine.engine import Engine
    from strata_engine.server import create_app
    from strata_engine.server.run import run_in_thread

    config = {"executor": args.executor, "batch": args.batch, "ctx": args.ctx, "log_events": False}
    if args.executor == "sim":
        config["time_scale"] = args.time_scale
    if args.model:
        config["model"] = args.model
    engine = Engine.from_pretrained(**config).start()
    url, stop = run_in_thread(create_app(engine))
    client = subprocess.Popen(
        [sys.executable, __file__, "--client"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    runs = []
    try:
        api_round(engine, [f"warm {i}" for i in range(args.clients)], 8)
        for r in range(args.rounds):
            order = ("api", "http") if r % 2 == 0 else ("http", "api")
            prompts = [f"round {r} client {i}: tell me about item {i * 7 + r}" for i in range(args.clients)]
            for arm in order:
                if arm == "api":
                    result = api_round(engine, prompts, args.max_tokens)
                else:
                    client.stdin.write(
                        json.dumps({"url": url, "prompts": prompts, "max_tokens": args.max_tokens}) + "\n"
                    )
                    client.stdin.flush()
                    result = json.loads(client.stdout.readline())
                result.update(arm=arm, round=r, rate=result["tokens"] / result["seconds"])
                runs.append(result)
                busy = f", client process busy {result['client_cpu_share']:.0%}" if arm == "http" else ""
                print(
                    f"round {r} {arm:4s}: {result['tokens']} tokens in {result['seconds']:.3f} s = "
                    f"{result['rate']:.0f} tok/s, median TTFT {result['ttft_median'] * 1000:.0f} ms{busy}",
                    file=sys.stderr,
                )
    finally:
        client.stdin.close()
        client.wait(30)
        stop()
        engine.shutdown()
    return {
        "config": {
            **config,
            "clients": args.clients,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "model_name": engine.model_name,
            "cpus": os.cpu_count(),
        },
        "runs": runs,
    }


def render(data: dict) -> str:
    runs = data["runs"]
    api = [r["rate"] for r in runs if r["arm"] == "api"]
    http = [r["rate"] for r in runs if r["arm"] == "http"]
    per_round = {}
    for r in runs:
        per_round.setdefault(r["round"], {})[r["arm"]] = r["rate"]
    ratios = [v["http"] / v["api"] for v in per_round.values() if "http" in v and "api" in v]
    ratio = statistics.median(ratios)
    cfg = data["config"]
    lines = [
        f"engine {cfg['model_name']} ({cfg['executor']}), batch {cfg['batch']}, {cfg['clients']} streaming clients x "
        f"{cfg['max_tokens']} tokens, {cfg['rounds']} rounds (ABBA)",
        "",
        "| arm | median tok/s | min-max |",
        "|---|---:|---:|",
        f"| Python API | {statistics.median(api):.0f} | {min(api):.0f}-{max(api):.0f} |",
        f"| HTTP, streaming | {statistics.median(http):.0f} | {min(http):.0f}-{max(http):.0f} |",
        "",
        f"HTTP / API per round: {', '.join(f'{x:.3f}' for x in ratios)}; median {ratio:.3f} "
        f"(target >= {TARGET:.2f}: {'met' if ratio >= TARGET else 'NOT met'})",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--render", metavar="JSON", help="only render the table of an earlier run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--executor", choices=["sim", "torch"], default="sim")
    ap.add_argument("--time-scale", type=float, default=20.0, help="sim: modelled seconds per wall second")
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="bench-out/http_overhead.json")
    args = ap.parse_args()
    if args.client:
        client_main()
        return
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    data = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(render(data))
    print(f"\nraw runs: {out}")


if __name__ == "__main__":
    main()
