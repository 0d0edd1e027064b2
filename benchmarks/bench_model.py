#!/usr/bin/env python
"""Speed of our model step against transformers and llama.cpp on the same weights, at each thread count.

Measures, for the default model (or --model): prefill tokens/s (a --prompt-tokens prompt read in chunks of
--chunk), decode tokens/s at batch 1 and batch --batch (default 6; greedy, KV cache), each through the engine's stage
forward with batch invariance on (rows padded to the row tile, the default) and off (no padding), and
decode through the compiled step (`--compile`, runtime/compiled_step.py; --no-compile skips it); the
same through transformers' `generate` on the same HF directory; and prefill and batch-1 greedy decode
through llama.cpp (llama-cpp-python, an optional dependency: its arms are skipped with a message where it
is not installed) on the model exported with `strata-engine export --gguf` (f32). Every engine runs at
every --threads count, alternating within each repeat, and is reported at its best count.
Writes the raw numbers as JSON (--out), then prints the table and the targets: decode batch 1 >= llama.cpp's,
prefill >= llama.cpp's, batch-4 aggregate decode >= 2x llama.cpp's batch 1, batch-4 decode >= 2x
transformers', and whether our greedy tokens equal llama.cpp's.

  .venv/bin/python benchmarks/bench_model.py --threads 1,2 --repeats 5 --out bench-out/bench_model.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.model import load_model, resolve_model_path  # noqa: E402
from strata_engine.model.config import ModelConfig  # noqa: E402
from strata_engine.runtime.compiled_step import CompiledDecode  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile  # noqa: E402
from strata_engine.runtime.native.choice import install  # noqa: E402
from strata_engine.runtime.pipeline import Part  # noqa: E402
from strata_engine.runtime.stage_forward import stage_forward  # noqa: E402
from strata_engine.runtime_config import RuntimeConfig  # noqa: E402


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


def step(model, kv: KVCache, rows, row_tile: int, compiled=None) -> torch.Tensor:
    """One micro-batch as a one-stage engine runs it: rows (slot, first position, ids) -> logits [rows, V]."""
    part = Part.ragged(rows, want_logits=True)
    stage_forward(model, range(model.config.num_layers), kv, part, True, True, row_tile, "cpu", compiled)
    return part.logits


def ours_prefill(model, config, prompt: list[int], chunk: int, row_tile: int) -> None:
    apply_row_tile(model, row_tile)
    kv = KVCache(config, num_slots=1, ctx=len(prompt))
    for start in range(0, len(prompt), chunk):
        step(model, kv, [(0, start, prompt[start : start + chunk])], row_tile)


def ours_decode(
    model, config, prompts: list[list[int]], steps: int, row_tile: int, compiled=None
) -> tuple[float, list[int], list[float | None]]:
    """Read every prompt (untimed), then time `steps` greedy decode steps of all rows together; seconds, row
    0's greedy tokens and, per token, row 0's top-2 logprob margin where it was chosen (None for the first,
    chosen by the untimed read): arms that part at a small margin met a near-tie, not a fault. compiled: (its
    KV cache, a CompiledDecode over it) for the compiled decode step."""
    apply_row_tile(model, row_tile)
    batch, length = len(prompts), len(prompts[0])
    kv, compiled = compiled or (KVCache(config, num_slots=batch, ctx=length + steps + 1), None)
    tokens = [int(step(model, kv, [(slot, 0, ids)], row_tile)[0].argmax()) for slot, ids in enumerate(prompts)]
    first, kept = [], []
    start = time.perf_counter()
    for position in range(length, length + steps):
        first.append(tokens[0])
        logits = step(model, kv, [(slot, position, [token]) for slot, token in enumerate(tokens)], row_tile, compiled)
        kept.append(logits[0])  # a reference: the margin is computed after the clock stops
        tokens = logits.argmax(-1).tolist()
    took = time.perf_counter() - start
    return took, first, [None] + [top2_margin(row) for row in kept[:-1]]


def top2_margin(logits: torch.Tensor) -> float:
    top = torch.log_softmax(logits.double(), -1).topk(2).values
    return round(float(top[0] - top[1]), 6)


COMPILED: dict[tuple[int, int], tuple[KVCache, CompiledDecode]] = {}  # (batch, threads) -> its KV cache and step


def compiled_step(model, config, batch: int, threads: int, ctx: int) -> tuple[KVCache, CompiledDecode]:
    """The compiled decode step for `batch` rows at `threads` threads over its own KV cache, compiled on first
    use (inductor's CPU kernels keep the thread count they were compiled with), its GEMMs STRATA_COMPILED_GEMMS's
    (unset: aten)."""
    if (batch, threads) not in COMPILED:
        tile = default_row_tile(config, "cpu", torch.float32, threads)
        apply_row_tile(model, tile)
        kv = KVCache(config, num_slots=batch, ctx=ctx)
        COMPILED[batch, threads] = (
            kv,
            CompiledDecode(
                model,
                range(config.num_layers),
                kv,
                True,
                True,
                tile,
                batch,
                threads,
                gemms=RuntimeConfig.from_env().gemms,
            ),
        )
    return COMPILED[batch, threads]


def hf_generate_seconds(hf, prompts: list[list[int]], new_tokens: int) -> float:
    ids = torch.tensor(prompts)
    start = time.perf_counter()
    hf.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="strata-tiny-moe")
    p.add_argument(
        "--threads",
        default="1,2",
        help="comma-separated thread counts; every engine runs at each, and each engine's figure is its best count",
    )
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--decode-prompt", type=int, default=256, help="prompt length of each decode row")
    p.add_argument("--decode-steps", type=int, default=64)
    p.add_argument("--batch", type=int, default=6, help="the second decode batch (rows decoding together)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--matmul-size", type=int, default=2048)
    p.add_argument(
        "--no-llama-cpp", action="store_true", help="skip the llama.cpp arms even where llama-cpp-python is installed"
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the compiled decode step (strata-engine serve --compile; compiled once per batch and thread count)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-out/bench_model.json"))
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t]
    from transformers import AutoModelForCausalLM

    model, config = load_model(args.model)
    install(model)  # the native ops where the engine serves them
    # our arms: name -> row tile (1 = batch invariance off); the engine's own probed tile at the most threads timed
    tiles = {"ours": default_row_tile(config, "cpu", torch.float32, max(threads)), "ours_padding_off": 1}
    hf = AutoModelForCausalLM.from_pretrained(resolve_model_path(args.model), dtype=torch.float32).eval()
    prompt = prompt_bytes(args.prompt_tokens)
    rows = [prompt_bytes(args.decode_prompt, offset=10_000 * (i + 1)) for i in range(args.batch)]
    llama, gguf_dir = None, tempfile.TemporaryDirectory(prefix="bench-model-gguf-")
    if not args.no_llama_cpp:
        try:
            from strata_bench.engines.llama_cpp_python import InProcessLlama
            from strata_engine.model.gguf_export import export_gguf

            gguf = export_gguf(args.model, Path(gguf_dir.name) / "model.gguf", "f32")
            llama = InProcessLlama(gguf, ctx=max(len(prompt), args.decode_prompt + args.decode_steps) + 16)
        except ModuleNotFoundError as err:
            print(f"llama.cpp arms skipped: {err} (the GGUF export needs `gguf`: bash scripts/install_llama_cpp.sh)")
    r: dict = {
        "model": args.model,
        "threads": threads,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "command": "python " + " ".join(sys.argv),
        "row_tile": tiles["ours"],
        "llama_cpp": llama is not None,
    }
    # The machine may be shared: every engine and thread count alternate within every repeat, and the best
    # repeat (least disturbed) is the figure; the medians are kept in the JSON as well.
    samples: dict[str, list[float]] = {}
    greedy: dict[str, list[int]] = {}
    margins: dict[str, list[float | None]] = {}

    def record(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    with torch.inference_mode():
        a, b = torch.randn(args.matmul_size, args.matmul_size), torch.randn(args.matmul_size, args.matmul_size)
        torch.mm(a, b), ours_prefill(model, config, prompt, args.chunk, tiles["ours"])  # warm-up
        hf_generate_seconds(hf, [prompt], 1)
        ctx = args.decode_prompt + args.decode_steps + 1
        for _ in range(args.repeats):
            for t in threads:
                torch.set_num_threads(t)
                record(f"matmul_t{t}", seconds(lambda: torch.mm(a, b)))
                for arm, tile in tiles.items():
                    record(
                        f"{arm}_prefill_t{t}", seconds(lambda: ours_prefill(model, config, prompt, args.chunk, tile))
                    )
                record(f"hf_prefill_t{t}", hf_generate_seconds(hf, [prompt], 1))
                if llama:
                    record(f"llama_prefill_t{t}", llama.prefill_seconds(prompt, t))
                    took, greedy["llama"] = llama.greedy(rows[0], args.decode_steps + 1, t)
                    record(f"llama_decode_b1_t{t}", took)
                for batch in (1, args.batch):
                    for arm, tile in tiles.items():
                        took, greedy[arm], margins[arm] = ours_decode(
                            model, config, rows[:batch], args.decode_steps, tile
                        )
                        record(f"{arm}_decode_b{batch}_t{t}", took)
                    if args.compile:  # the arms above switched the weight layout back and forth: its guards recompile
                        kv_and_step = compiled_step(model, config, batch, t, ctx)
                        with kv_and_step[1].compiling():  # as compiled at first (STRATA_COMPILED_GEMMS: its GEMMs)
                            took, greedy["ours_compiled"], margins["ours_compiled"] = ours_decode(
                                model, config, rows[:batch], args.decode_steps, tiles["ours"], kv_and_step
                            )
                        record(f"ours_compiled_decode_b{batch}_t{t}", took)
                    one, full = (
                        hf_generate_seconds(hf, rows[:batch], 1),
                        hf_generate_seconds(hf, rows[:batch], args.decode_steps + 1),
                    )
                    record(f"hf_decode_b{batch}_t{t}", full - one)
    if llama:
        llama.close()
    gguf_dir.cleanup()
    best = {name: min(values) for name, values in samples.items()}
    r["seconds_best"], r["seconds_median"] = best, {name: statistics.median(v) for name, v in samples.items()}
    r["greedy_tokens_equal_llama"] = greedy["llama"][: len(greedy["ours"])] == greedy["ours"] if llama else None
    r["compiled_tokens_equal_eager"] = greedy["ours_compiled"] == greedy["ours"] if args.compile else None
    if args.compile:  # where they part: a near-tie flipped by last bits shows as one late token
        pairs = list(zip(greedy["ours_compiled"], greedy["ours"]))
        r["compiled_tokens_first_difference"] = at = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
        r["compiled_tokens_compared"] = len(pairs)
        if at is not None:  # the top-2 margins there, as each arm chose: a near-tie or a real difference
            r["compiled_first_difference_margins"] = {
                "eager": margins["ours"][at],
                "compiled": margins["ours_compiled"][at],
            }
    r["compile_s"] = {f"b{b}_t{t}": round(c.compile_s, 1) for (b, t), (_, c) in COMPILED.items()}
    work = {
        "prefill": len(prompt),
        "decode_b1": args.decode_steps,
        f"decode_b{args.batch}": args.batch * args.decode_steps,
    }
    rates: dict[str, dict[str, float]] = {}  # "<engine>_<measure>" -> {"t1": tok/s, ...}
    for name, secs in best.items():
        if name.startswith("matmul"):
            continue
        key, t = name.rsplit("_t", 1)
        measure = next(m for m in work if key.endswith(m))
        rates.setdefault(key, {})[f"t{t}"] = work[measure] / secs
    r["tok_s"] = rates
    r["best"] = {
        key: max(by_threads.items(), key=lambda kv: kv[1]) for key, by_threads in rates.items()
    }  # -> (threads, tok/s)
    r["matmul_gflops"] = max(2 * args.matmul_size**3 / best[f"matmul_t{t}"] / 1e9 for t in threads)
    r["ours_prefill_gflops"] = (
        prefill_flops(config, len(prompt)) / min(best[f"ours_prefill_t{t}"] for t in threads) / 1e9
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2) + "\n")
    print(render(r, args))


def render(r: dict, args) -> str:
    best = r["best"]

    def cell(key: str) -> str:
        if key not in best:
            return "—"
        t, rate = best[key]
        return f"{rate:.0f} ({t[1:]}t)"

    def ratio(num: str, den: str) -> str:
        return f"{best[num][1] / best[den][1]:.2f}" if num in best and den in best else "—"

    lines = [
        f"model {r['model']}, threads {r['threads']}, torch {r['torch']}, best of {args.repeats} alternating repeats, "
        f"each engine at its best thread count (in brackets); raw numbers in {args.out}",
        "",
        f"| tok/s | strata (invariant, rows padded to {r['row_tile']}) | strata compiled | strata (padding off) | transformers "
        "| llama.cpp |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for measure, label in (
        ("prefill", f"prefill ({args.prompt_tokens} tokens, chunks of {args.chunk})"),
        ("decode_b1", "decode, batch 1"),
        (f"decode_b{args.batch}", f"decode, batch {args.batch}"),
    ):
        lines.append(
            f"| {label} | {cell('ours_' + measure)} | {cell('ours_compiled_' + measure)} "
            f"| {cell('ours_padding_off_' + measure)} | {cell('hf_' + measure)} | {cell('llama_' + measure)} |"
        )
    lines += ["", "| target | invariant | compiled | padding off |", "|---|---:|---:|---:|"]
    for label, num, den in (
        ("decode batch 1 / llama.cpp batch 1 >= 1.0", "decode_b1", "llama_decode_b1"),
        ("prefill / llama.cpp >= 1.0", "prefill", "llama_prefill"),
        (
            f"decode batch {args.batch} (aggregate) / llama.cpp batch 1 >= 2.0",
            f"decode_b{args.batch}",
            "llama_decode_b1",
        ),
        (
            f"decode batch {args.batch} / transformers batch {args.batch} >= 2.0",
            f"decode_b{args.batch}",
            f"hf_decode_b{args.batch}",
        ),
        ("prefill / transformers >= 1.0", "prefill", "hf_prefill"),
    ):
        lines.append(
            f"| {label} | {ratio('ours_' + num, den)} | {ratio('ours_compiled_' + num, den)} "
            f"| {ratio('ours_padding_off_' + num, den)} |"
        )
    lines.append("")
    lines.append(
        f"prefill useful GFLOP/s {r['ours_prefill_gflops']:.1f} against fp32 mm {args.matmul_size}^3 {r['matmul_gflops']:.1f} "
        f"({r['ours_prefill_gflops'] / r['matmul_gflops']:.2f})"
    )
    if r["llama_cpp"]:
        lines.append(f"greedy tokens of decode row 0 equal llama.cpp's: {r['greedy_tokens_equal_llama']}")
    if r["compiled_tokens_equal_eager"] is not None:
        lines.append(
            f"compiled step: greedy tokens of decode row 0 equal the eager step's: {r['compiled_tokens_equal_eager']}"
            + (
                f" (the first of {r['compiled_tokens_compared']} that differs: token {r['compiled_tokens_first_difference']};"
                f" top-2 logprob margins there: {r['compiled_first_difference_margins']})"
                if r.get("compiled_tokens_first_difference") is not None
                else ""
            )
            + "; "
            f"compile seconds per (batch, threads): {r['compile_s']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
