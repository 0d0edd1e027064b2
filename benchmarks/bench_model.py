#!/usr/bin/env python
"""Speed of our model forward against transformers on the same weights, and against the machine's matmul rate.

Measures, for the default model (or --model): prefill tokens/s (a --prompt-tokens prompt read in chunks of
--chunk), decode tokens/s at batch 1 and batch 4 (greedy, KV cache), each through the engine's stage
forward with batch invariance on (rows padded to the row tile, the default) and off (no padding), the
same through transformers' `generate` on the same HF directory, and our prefill FLOP rate as a share of a
large fp32 torch.mm.
Writes the raw numbers as JSON first (--out), then prints the table and the target ratios:
prefill >= transformers', batch-4 decode >= 2x transformers' per-token rate, prefill >= 50% of matmul.

  .venv/bin/python benchmarks/bench_model.py --out bench-out/bench_model.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_engine.runtime.kv_cache import KVCache  # noqa: E402
from strata_engine.model import load_model, resolve_model_path  # noqa: E402
from strata_engine.model.config import ModelConfig  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, row_tile_for  # noqa: E402
from strata_engine.runtime.pipeline import Part  # noqa: E402
from strata_engine.runtime.stage_forward import stage_forward  # noqa: E402



def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prompt_bytes(count: int, offset: int = 0) -> list[int]:
    """Real Python source (the stdlib's own), so the model sees text like its training data."""
    text = b"".join(p.read_bytes() for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("[a-c]*.py")))
    return list(text[offset : offset + count])


def prefill_flops(c: ModelConfig, tokens: int) -> float:
    """Useful FLOPs of reading `tokens` prompt tokens from position 0: matmuls (routed experts count k times)
    plus causal attention (QK^T and PV over each query's own prefix); the LM head over every position."""
    d, q_dim, kv_dim = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    per_token = 0
    for layer in range(c.num_layers):
        per_token += d * (q_dim + 2 * kv_dim) + q_dim * d
        if c.layer_is_moe(layer):
            per_token += d * c.num_experts + c.num_experts_per_tok * 3 * d * c.moe_intermediate_size
            per_token += 3 * d * c.shared_expert_intermediate_size
        else:
            per_token += 3 * d * c.intermediate_size
    per_token += d * c.vocab_size
    attention = c.num_layers * 4 * q_dim * tokens * (tokens + 1) / 2
    return 2 * per_token * tokens + attention


def step(model, kv: KVCache, rows, row_tile: int) -> torch.Tensor:
    """One micro-batch as a one-stage engine runs it: rows (slot, first position, ids) -> logits [rows, V]."""
    part = Part.ragged(rows, want_logits=True)
    stage_forward(model, range(model.config.num_layers), kv, part, True, True, row_tile, "cpu")
    return part.logits


def ours_prefill(model, config, prompt: list[int], chunk: int, row_tile: int) -> None:
    apply_row_tile(model, row_tile)
    kv = KVCache(config, num_slots=1, ctx=len(prompt))
    for start in range(0, len(prompt), chunk):
        step(model, kv, [(0, start, prompt[start : start + chunk])], row_tile)


def ours_decode(model, config, prompts: list[list[int]], steps: int, row_tile: int) -> float:
    """Read every prompt (untimed), then time `steps` greedy decode steps of all rows together; seconds."""
    apply_row_tile(model, row_tile)
    batch, length = len(prompts), len(prompts[0])
    kv = KVCache(config, num_slots=batch, ctx=length + steps + 1)
    tokens = [int(step(model, kv, [(slot, 0, ids)], row_tile)[0].argmax()) for slot, ids in enumerate(prompts)]
    start = time.perf_counter()
    for position in range(length, length + steps):
        logits = step(model, kv, [(slot, position, [token]) for slot, token in enumerate(tokens)], row_tile)
        tokens = logits.argmax(-1).tolist()
    return time.perf_counter() - start


def hf_generate_seconds(hf, prompts: list[list[int]], new_tokens: int) -> float:
    ids = torch.tensor(prompts)
    start = time.perf_counter()
    hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                do_sample=False, pad_token_id=0)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="strata-tiny-moe")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: OpenMP spin-waits thrash when the cores are shared)")
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--decode-prompt", type=int, default=256, help="prompt length of each decode row")
    p.add_argument("--decode-steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--matmul-size", type=int, default=2048)
    p.add_argument("--out", type=Path, default=Path("bench-out/bench_model.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model, config = load_model(args.model)
    arms = {"ours": row_tile_for(config), "ours_padding_off": 1}  # name -> row tile (1 = batch invariance off)
    hf = AutoModelForCausalLM.from_pretrained(resolve_model_path(args.model), dtype=torch.float32).eval()
    prompt = prompt_bytes(args.prompt_tokens)
    rows = [prompt_bytes(args.decode_prompt, offset=10_000 * (i + 1)) for i in range(4)]
    r: dict = {"model": args.model, "threads": args.threads, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
               "command": "python " + " ".join(sys.argv)}
    # The machine may be shared: ours and transformers alternate within every repeat, and the best repeat
    # (least disturbed) is the figure; the medians are kept in the JSON as well.
    samples: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    with torch.inference_mode():
        a, b = torch.randn(args.matmul_size, args.matmul_size), torch.randn(args.matmul_size, args.matmul_size)
        torch.mm(a, b), ours_prefill(model, config, prompt, args.chunk, arms['ours'])  # warm-up
        hf_generate_seconds(hf, [prompt], 1)
        for _ in range(args.repeats):
            record("matmul", seconds(lambda: torch.mm(a, b)))
            for arm, tile in arms.items():
                record(f"{arm}_prefill", seconds(lambda: ours_prefill(model, config, prompt, args.chunk, tile)))
            record("hf_prefill", hf_generate_seconds(hf, [prompt], 1))
            for batch in (1, 4):
                for arm, tile in arms.items():
                    record(f"{arm}_decode_b{batch}", ours_decode(model, config, rows[:batch], args.decode_steps, tile))
                one, full = hf_generate_seconds(hf, rows[:batch], 1), hf_generate_seconds(hf, rows[:batch], args.decode_steps + 1)
                record(f"hf_decode_b{batch}", full - one)
    best = {name: min(values) for name, values in samples.items()}
    r["seconds_best"], r["seconds_median"] = best, {name: statistics.median(v) for name, v in samples.items()}
    r["matmul_gflops"] = 2 * args.matmul_size**3 / best["matmul"] / 1e9
    r["row_tile"] = arms["ours"]
    for arm in arms:
        r[f"{arm}_prefill_tok_s"] = len(prompt) / best[f"{arm}_prefill"]
        for batch in (1, 4):
            r[f"{arm}_decode_b{batch}_tok_s"] = batch * args.decode_steps / best[f"{arm}_decode_b{batch}"]
    r["ours_prefill_gflops"] = prefill_flops(config, len(prompt)) / best["ours_prefill"] / 1e9
    r["hf_prefill_tok_s"] = len(prompt) / best["hf_prefill"]
    for batch in (1, 4):
        r[f"hf_decode_b{batch}_tok_s"] = batch * args.decode_steps / best[f"hf_decode_b{batch}"]
    r["ratio_prefill_vs_hf"] = r["ours_prefill_tok_s"] / r["hf_prefill_tok_s"]
    r["ratio_decode_b4_vs_hf"] = r["ours_decode_b4_tok_s"] / r["hf_decode_b4_tok_s"]
    r["ratio_prefill_vs_matmul"] = r["ours_prefill_gflops"] / r["matmul_gflops"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2) + "\n")
    print(render(r, args))


def render(r: dict, args) -> str:
    lines = [
        f"model {r['model']}, {r['threads']} threads, torch {r['torch']}, best of {args.repeats} alternating repeats; raw numbers in {args.out}", "",
        f"| measure | strata (invariant, rows padded to {r['row_tile']}) | strata (padding off) | transformers | ratio (invariant / transformers) | target |",
        "|---|---:|---:|---:|---:|---|",
        f"| prefill tok/s ({args.prompt_tokens} tokens, chunks of {args.chunk}) | {r['ours_prefill_tok_s']:.0f} | {r['ours_padding_off_prefill_tok_s']:.0f} "
        f"| {r['hf_prefill_tok_s']:.0f} | {r['ratio_prefill_vs_hf']:.2f} | >= 1 |",
        f"| decode tok/s, batch 1 | {r['ours_decode_b1_tok_s']:.0f} | {r['ours_padding_off_decode_b1_tok_s']:.0f} | {r['hf_decode_b1_tok_s']:.0f} "
        f"| {r['ours_decode_b1_tok_s'] / r['hf_decode_b1_tok_s']:.2f} | |",
        f"| decode tok/s, batch 4 | {r['ours_decode_b4_tok_s']:.0f} | {r['ours_padding_off_decode_b4_tok_s']:.0f} | {r['hf_decode_b4_tok_s']:.0f} "
        f"| {r['ratio_decode_b4_vs_hf']:.2f} | >= 2 |",
        f"| prefill GFLOP/s vs fp32 mm {args.matmul_size}^3 ({r['matmul_gflops']:.1f} GFLOP/s) | {r['ours_prefill_gflops']:.1f} | | | "
        f"{r['ratio_prefill_vs_matmul']:.2f} | >= 0.5 |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
