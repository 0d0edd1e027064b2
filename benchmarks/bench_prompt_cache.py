"""An agent's next turn with the prompt cache on and off, side by side in one run.

Each round: agent A reads a 4,000-token context (turn 1, a reply of 16 tokens), then asks again with that
context, its reply and 64 new tokens (turn 2): a slot hit. Agent B does the same, but two other agents take
the slot in between, so B's turn 2 comes back from the host store. The same turn-2 prompts are read cold by
an engine started with --prompt-cache 0. Time to first token is measured from submit to the first token on
the engine's clock; tokens must be equal. Raw JSON first (--out), then the ratios:

    .venv/bin/python benchmarks/bench_prompt_cache.py --rounds 3 --out runs/prompt_cache.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from strata_engine import SamplingParams
from strata_engine.engine import Engine

REPLY = SamplingParams(max_tokens=16, ignore_eos=True)


def context(seed: int, tokens: int) -> list[int]:
    return [(seed * 7919 + 31 * i + i * i // 7) % 250 for i in range(tokens)]


def first_token_s(engine: Engine, prompt: list[int]) -> tuple[float, list[int], int]:
    """Seconds from submit to the first token, the tokens, and the prompt tokens the cache gave."""
    t0 = time.monotonic()
    handle = engine.submit(prompt, REPLY)
    first = None
    for _ in handle:
        first = first if first is not None else time.monotonic() - t0
    done = handle.result()
    return first, done.token_ids, done.cached_tokens


def one_round(cached: Engine, cold: Engine, seed: int, context_tokens: int, new_tokens: int) -> dict:
    turns = {}
    for agent, via_store in (("A", False), ("B", True)):
        first_prompt = context(seed * 10 + len(turns), context_tokens)
        reply = cached.generate([first_prompt], REPLY)[0].token_ids
        if via_store:  # two other agents take the slot: B's prefix goes to the host store
            for other in range(2):
                cached.generate([context(seed * 10 + 5 + other, 600)], REPLY)
        prompt = first_prompt + reply + context(seed * 10 + 9, new_tokens)
        hit_s, hit_tokens, cached_tokens = first_token_s(cached, prompt)
        cold_s, cold_tokens, _ = first_token_s(cold, prompt)
        turns["store" if via_store else "slot"] = {
            "prompt_tokens": len(prompt),
            "cached_tokens": cached_tokens,
            "ttft_cached_s": hit_s,
            "ttft_cold_s": cold_s,
            "ratio": hit_s / cold_s,
            "tokens_equal": hit_tokens == cold_tokens,
        }
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--context", type=int, default=4000)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--prefill-chunk", type=int, default=512)
    parser.add_argument("--out", default=None, help="write the raw JSON here")
    args = parser.parse_args()
    setup = dict(batch=1, prefill_chunk=args.prefill_chunk, log_events=False)
    with Engine.from_pretrained(**setup) as cached, Engine.from_pretrained(prompt_cache_mib=0, **setup) as cold:
        for engine in (cached, cold):  # warm-up: first forwards pay for allocations
            engine.generate([context(999, 600)], REPLY)
        rounds = [one_round(cached, cold, seed, args.context, args.new) for seed in range(args.rounds)]
        raw = {
            "args": vars(args),
            "engine": {k: cached.info()[k] for k in ("model", "device", "dtype", "batch_invariant")},
            "prompt_cache": cached.info()["prompt_cache"],
            "rounds": rounds,
        }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(raw, f, indent=1)
    for source, limit in (("slot", 0.2), ("store", 0.3)):
        turns = [r[source] for r in rounds]
        ratio = statistics.median(t["ratio"] for t in turns)
        print(
            f"{source} hit: TTFT {statistics.median(t['ttft_cached_s'] for t in turns) * 1000:.0f} ms vs cold "
            f"{statistics.median(t['ttft_cold_s'] for t in turns) * 1000:.0f} ms: {ratio:.3f}x (target <= {limit}x); "
            f"cached_tokens {min(t['cached_tokens'] for t in turns)} of {turns[0]['prompt_tokens']}; "
            f"tokens equal: {all(t['tokens_equal'] for t in turns)}"
        )


if __name__ == "__main__":
    main()
