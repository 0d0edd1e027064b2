"""Steady decode, engine against engine: N concurrent greedy requests of T tokens each (`ignore_eos`, not streamed), no
prompt reads beside them, a fresh engine per arm per round, arms alternating (order reversed each round).

Prints decode tokens per second (all requests' tokens over the wall time from the first send to the
last answer) per arm and round, the medians, and each arm's ratio to the first arm. The engines' commands are
`strata-bench run --arm` commands (the engines preset's placeholders `{vllm}`, `{model_dir}`,
`{llama_server}`, `{gguf}` are filled the same way). Example, Strata compiled against vLLM:

    .venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 \\
        --arm "strata=strata-engine serve --batch 6 --ctx 8192 --compile" \\
        --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata_bench.engines.launcher import EngineProcess  # noqa: E402
from strata_bench.engines.probe import probe  # noqa: E402
from strata_bench.arms import ArmError  # noqa: E402
from strata_bench.presets import engine_commands  # noqa: E402


def one_round(url: str, streams: int, tokens: int) -> tuple[float, int]:
    """(tokens per second, tokens) of `streams` concurrent greedy requests of `tokens` each, not streamed:
    a client parsing six SSE streams in Python takes a good part of a 2-core machine, and vLLM's rate
    measured through one dropped by half, so the engines get the cores and answer once at the end."""
    model = probe(url).model or "strata-tiny-moe"  # the id the server answers to (vLLM wants its own)

    def post(i: int) -> tuple[int, str | None]:
        body = {
            "model": model,
            "prompt": f"def fibonacci_{i}(n):\n    ",
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        answer = httpx.post(f"{url}/v1/completions", json=body, timeout=600.0)
        answer.raise_for_status()
        data = answer.json()
        return int(data["usage"]["completion_tokens"]), data["choices"][0].get("finish_reason")

    post(99)  # warm-up
    with ThreadPoolExecutor(streams) as pool:
        start = time.perf_counter()
        answers = list(pool.map(post, range(streams)))
        took = time.perf_counter() - start
    short = [reason for _, reason in answers if reason != "length"]
    if short:  # ignore_eos: every request runs to max_tokens
        raise SystemExit(f"a request ended early ({short[0]}): the server ignored ignore_eos?")
    got = sum(count for count, _ in answers)
    return got / took, got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", action="append", required=True, help="NAME=COMMAND (an engine serving the embedded model)")
    p.add_argument("--streams", type=int, default=6)
    p.add_argument("--tokens", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    try:
        arms = engine_commands(args.arm)
    except ArmError as exc:
        raise SystemExit(str(exc)) from None
    rates: dict[str, list[float]] = {name: [] for name, _ in arms}
    for round_ in range(args.rounds):
        for name, command in arms if round_ % 2 == 0 else arms[::-1]:
            with EngineProcess(command, name=name) as engine:
                rate, got = one_round(engine.url, args.streams, args.tokens)
            rates[name].append(rate)
            print(f"round {round_}: {name}: {rate:.0f} tok/s ({got} tokens, {args.streams} streams)", flush=True)
    first = statistics.median(rates[arms[0][0]])
    print(f"\n| arm | decode tok/s, median of {args.rounds} (min-max) | ratio to {arms[0][0]} |\n|---|---:|---:|")
    for name, _ in arms:
        median = statistics.median(rates[name])
        print(f"| {name} | {median:.0f} ({min(rates[name]):.0f}-{max(rates[name]):.0f}) | {median / first:.2f}x |")


if __name__ == "__main__":
    main()
