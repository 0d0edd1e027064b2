#!/usr/bin/env python
"""Held-out bits per byte and greedy top-2 margins of a model at long contexts, through the engine's own
inference path (KV cache, prompt chunks), so what it measures is what a user's long prompt gets.

For each context length N: windows of N held-out bytes (the training script's held-out files, framed the
same way) are read in chunks; bits per byte are scored over each window's last --score bytes (the
positions that sit deepest in the context), and the top-1 minus top-2 logit margin of each of those
predictions is recorded. Every context length scores the same bytes (the windows end at the same
places), so a difference between rows is the context's doing, not the text's. Prints a markdown table (the model card's) and writes JSON with --json.

  .venv/bin/python scripts/eval_long_context.py --contexts 2048,8192,32768,65536
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from strata_engine.model.weights import load_model  # noqa: E402
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.runtime.native.choice import install  # noqa: E402
from train_tiny_moe import corpus_files, framed, is_heldout  # noqa: E402


@torch.inference_mode()
def score_window(
    model, config, window: torch.Tensor, score: int, chunk: int, greedy: int
) -> tuple[float, list[float], list[float]]:
    """window [N+1] ids -> (bits per byte over its last `score` predictions, their top-1 minus top-2 margins,
    the margins of `greedy` tokens generated after the whole window)."""
    length = len(window) - 1
    cache = KVCache(config, 1, length + 1 + greedy, torch.float32, "cpu")
    slots = torch.zeros(1, dtype=torch.long)
    bits, scored, margins = 0.0, 0, []
    for start in range(0, length, chunk):
        end = min(length, start + chunk)
        tokens = window[start:end].long()[None]
        positions = torch.arange(start, end)[None]
        logits = model(tokens, positions, cache, slots)[0]  # [T, V]
        first_scored = max(start, length - score)
        if end <= first_scored:
            continue
        rows = logits[first_scored - start :]
        targets = window[first_scored + 1 : end + 1].long()
        keep = targets < 256  # bytes only, as the training script scores them (not the files' bos/eos)
        logp = torch.log_softmax(rows[keep].float(), dim=-1)
        bits += float(-logp.gather(1, targets[keep][:, None]).sum()) / 0.6931471805599453
        scored += int(keep.sum())
        top2 = rows.topk(2, dim=-1).values
        margins += (top2[:, 0] - top2[:, 1]).tolist()
    greedy_margins, token, position = [], window[length:].long()[None], length
    for _ in range(greedy):  # greedy decode after the window, one token at a time through the KV cache
        logits = model(token, torch.tensor([[position]]), cache, slots)[0, -1]
        top2 = logits.topk(2)
        greedy_margins.append(float(top2.values[0] - top2.values[1]))
        token, position = top2.indices[:1][None], position + 1
    return bits / scored, margins, greedy_margins


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="strata-tiny-moe")
    p.add_argument("--contexts", default="2048,8192,32768,65536", help="comma-separated context lengths")
    p.add_argument("--score", type=int, default=1024, help="bytes scored at the end of each window")
    p.add_argument("--windows", type=int, default=2, help="windows per context length")
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--greedy", type=int, default=64, help="greedy tokens generated after each window")
    p.add_argument("--holdout-every", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, config = load_model(args.model, device="cpu", dtype=torch.float32)
    install(model)  # the native ops where the engine serves them
    val = framed([f for f in corpus_files() if is_heldout(f, args.holdout_every)])
    contexts = [int(c) for c in args.contexts.split(",")]
    longest = max(contexts)
    step = (len(val) - longest - 1) // max(1, args.windows)
    ends = [longest + 1 + i * step for i in range(args.windows)]  # each window is val[end - n - 1 : end]
    rows = []
    for n in contexts:
        if longest + 1 > len(val):
            sys.exit(f"--contexts {n}: the held-out text has only {len(val):,} bytes")
        if n > config.max_position_embeddings:
            sys.exit(f"--contexts {n} exceeds the model's max_position_embeddings ({config.max_position_embeddings})")
        t0 = time.perf_counter()
        results = [
            score_window(model, config, val[end - n - 1 : end], min(args.score, n), args.chunk, args.greedy)
            for end in ends
        ]
        margins = [m for _, ms, _ in results for m in ms]
        greedy = [m for _, _, gs in results for m in gs]
        row = {
            "context": n,
            "bits_per_byte": statistics.fmean(b for b, _, _ in results),
            "greedy_margin_median": statistics.median(greedy),
            "greedy_margin_min": min(greedy),
            "greedy_steps": len(greedy),
            "margin_median": statistics.median(margins),
            "margin_min": min(margins),
            "share_margin_below_0.1": sum(m < 0.1 for m in margins) / len(margins),
            "scored_bytes": len(margins),
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        print(
            f"context {n}: {row['bits_per_byte']:.3f} bits/byte, margin median {row['margin_median']:.2f} "
            f"(min {row['margin_min']:.4f}), {row['seconds']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"| context | held-out bits/byte (last {args.score} bytes of {args.windows} windows) | top-2 margin median "
        f"| min | share < 0.1 | greedy top-2 margin median ({args.greedy} tokens x {args.windows}) | greedy min |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['context']:,} | {r['bits_per_byte']:.3f} | {r['margin_median']:.2f} | {r['margin_min']:.4f} | "
            f"{r['share_margin_below_0.1']:.1%} | {r['greedy_margin_median']:.2f} | {r['greedy_margin_min']:.4f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"model": args.model, "args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
