#!/usr/bin/env python
"""Row-major against column-major weights on the CPU: the model's GEMMs, then its decode step.

The runtime lays its CPU float32 weights column-major where it pads rows (runtime/weight_layout.py). This
measures why, on this machine, in one run with the two layouts alternating: for every GEMM shape of the
model (K x N) at row counts --rows and each --threads count, the time of F.linear with the weight stored
row-major and column-major and whether every output row is bitwise the same; then the padded decode step
(the row tile, as the engine runs it) at batch 1 and 4 in each layout, and whether the logits are equal.

  .venv/bin/python benchmarks/bench_weight_layout.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_model import prompt_bytes, step  # noqa: E402
from strata_engine.model import load_model  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, row_tile_for  # noqa: E402
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.runtime.weight_layout import gemm_layout  # noqa: E402


def gemm_shapes(config) -> list[tuple[str, int, int]]:
    """(name, K, N) of the model's GEMMs."""
    d, heads = config.hidden_size, config.num_heads * config.head_dim
    shapes = [
        ("qkv", d, heads + 2 * config.num_kv_heads * config.head_dim),
        ("o_proj", heads, d),
        ("lm_head", d, config.vocab_size),
    ]
    if config.num_experts:
        inter = config.moe_intermediate_size
        shapes += [
            ("router", d, config.num_experts),
            ("expert gate/up", d, 2 * inter),
            ("expert down", inter, d),
            ("every expert gate/up", d, config.num_experts * 2 * inter),
        ]
    return shapes


def per_call_us(fn, seconds: float = 0.25) -> float:
    for _ in range(20):
        fn()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


def decode_seconds(model, config, batch: int, steps: int, tile: int) -> tuple[float, torch.Tensor]:
    prompts = [prompt_bytes(128, offset=10_000 * (i + 1)) for i in range(batch)]
    kv = KVCache(config, num_slots=batch, ctx=len(prompts[0]) + steps + 1)
    tokens = [int(step(model, kv, [(slot, 0, ids)], tile)[0].argmax()) for slot, ids in enumerate(prompts)]
    start = time.perf_counter()
    for position in range(len(prompts[0]), len(prompts[0]) + steps):
        logits = step(model, kv, [(slot, position, [token]) for slot, token in enumerate(tokens)], tile)
        tokens = logits.argmax(-1).tolist()
    return time.perf_counter() - start, logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="strata-tiny-moe")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rows", default="16,32,64,512", help="comma-separated GEMM row counts")
    p.add_argument("--steps", type=int, default=64, help="decode steps per timing")
    p.add_argument(
        "--repeats", type=int, default=5, help="decode timings per layout (alternating); the median is shown"
    )
    args = p.parse_args()
    model, config = load_model(args.model)
    tile = row_tile_for(config)
    threads = [int(t) for t in args.threads.split(",") if t]
    generator = torch.Generator().manual_seed(0)
    print(f"{args.model}: F.linear per call, µs (row-major -> column-major weight), torch {torch.__version__}")
    for count in threads:
        torch.set_num_threads(count)
        for rows in (int(r) for r in args.rows.split(",") if r):
            cells = []
            for name, inner, outer in gemm_shapes(config):
                x, w = torch.randn(rows, inner, generator=generator), torch.randn(outer, inner, generator=generator)
                w_col = w.t().contiguous().t()
                same = torch.equal(F.linear(x, w), F.linear(x, w_col))
                row_us, col_us = per_call_us(lambda: F.linear(x, w)), per_call_us(lambda: F.linear(x, w_col))
                cells.append(f"{name} {row_us:.0f}->{col_us:.0f}{'' if same else ' (bits differ)'}")
            print(f"  {count} thread(s), {rows} rows: " + "; ".join(cells))
    with torch.inference_mode():
        apply_row_tile(model, tile)
        for count in threads:
            torch.set_num_threads(count)
            for batch in (1, 4):
                times: dict[bool, list[float]] = {False: [], True: []}
                logits: dict[bool, torch.Tensor] = {}
                for _ in range(args.repeats):
                    for column in (False, True):
                        gemm_layout(model, column_major=column)
                        seconds, logits[column] = decode_seconds(model, config, batch, args.steps, tile)
                        times[column].append(seconds)
                row_ms, col_ms = (statistics.median(times[c]) / args.steps * 1e3 for c in (False, True))
                same = "bitwise equal" if torch.equal(logits[False], logits[True]) else "LOGITS DIFFER"
                print(
                    f"  decode step, batch {batch}, {count} thread(s), rows padded to {tile}: row-major {row_ms:.2f} ms, "
                    f"column-major {col_ms:.2f} ms ({row_ms / col_ms:.2f}x); last logits {same}"
                )


if __name__ == "__main__":
    main()
