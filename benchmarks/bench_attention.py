#!/usr/bin/env python
"""The engine's attention paths against the plain alternatives they replaced, at the model's shapes, on the CPU.

docs/measurements/decode-step.md ("What each thing tried bought") cites two attention timings; this script reproduces them,
in one process with the compared arms alternating (A, B, B, A, ...), at --threads threads, float32, the
model's head counts, head_dim and sliding window read from its config:

  1. decode, one query of one row over --keys cached keys: `attend_row` (the flash kernel, as the engine
     calls it) against two bmm's and a softmax (the query heads sharing a kv head folded by a reshape);
  2. a prompt chunk of each of --chunks consecutive queries past the window, starting at --start:
     the flash band path (three unmasked flash calls merged, `band_window_chunk`) against the masked
     path (one `scaled_dot_product_attention` over every key the chunk sees: what a chunk took before the
     band path, and what non-consecutive rows still take);
  3. the compiled decode step's attention op for a micro-batch of --decode-rows rows (padded to 8, each
     row's KV write included) at --decode-positions: its per-row ATen calls (`decode_attention`, native=False)
     against the native op (runtime/native/decode_attention.py; skipped where it cannot be built);
  4. a prompt chunk of each of --chunks queries at each of --chunk-starts: the flash paths (`attend_row`
     without a hook: what a chunk takes with STRATA_CHUNK_KERNEL=0) against the native chunk op
     (runtime/native/chunk_attention.py, `attend_row` with its hook, as the engine calls it; skipped where it
     cannot be built);
  5. decode rows over a quantized cache (--kv-dtype q8 and k8v4), --decode-rows rows at --decode-positions:
     each row's write, the dequantized window and its flash call (what STRATA_QUANT_DECODE_KERNEL=0 takes)
     against the native op (runtime/native/quant_decode_attention.py).

`--against REV` times the native ops as they are here against themselves as git revision REV had them
(sections 3, 4 and 5: A = REV's op, built from its C++ at this level, B = this checkout's), and says whether
their outputs agree bit for bit: what a change to an op bought, at each level, reproducibly.

`--isa LEVEL` runs it all as a machine of that level would: the native ops built with -march=LEVEL
(`STRATA_NATIVE_MARCH`), ATen's kernels at that capability (`ATEN_CPU_CAPABILITY`) and MKL's at that level
(`MKL_ENABLE_INSTRUCTIONS`), the script re-run with them set; a level this CPU cannot execute is refused.

Inputs are views of a KV cache, as the engine passes them. Each arm's output is compared with a float64
reference computed with plain math (max abs difference). Every cell is the median and min over --repeats
samples after warm-up; a sample is the mean of enough calls to take ~--sample-ms. B/A is of the medians.

  .venv/bin/python benchmarks/bench_attention.py
  .venv/bin/python benchmarks/bench_attention.py --isa x86-64-v3    # as an AVX2 machine runs it
  .venv/bin/python benchmarks/bench_attention.py --isa x86-64-v3 --sections 4 --against HEAD~3
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_bench.provenance import cpu_flags, cpu_line  # noqa: E402
from strata_engine.model import load_model  # noqa: E402
from strata_engine.model.attention import band_window_chunk, flash_cpu, attend_row  # noqa: E402
from strata_engine.runtime.native.chunk_attention import attend_chunk, native_chunk_attention  # noqa: E402
from strata_engine.runtime.native.decode_attention import native_decode_attention  # noqa: E402
from strata_engine.runtime.native.quant_decode_attention import native_quant_decode_attention  # noqa: E402
from attention_arms import (  # noqa: E402
    alternate,
    decode_batch_arms,
    header,
    ints,
    max_diff,
    op_at,
    quant_decode_arms,
    reference,
    row,
    row_inputs,
    same_bits,
)


def bmm_softmax(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """One query, no mask: [1, H, 1, hd] against [1, Hkv, L, hd] as two bmm's and a softmax -> [1, H, 1, hd]."""
    heads, kv_heads, head_dim = q.shape[1], keys.shape[1], q.shape[3]
    folded = q.reshape(kv_heads, heads // kv_heads, head_dim)  # the query heads sharing a kv head: one bmm
    scores = torch.bmm(folded, keys[0].transpose(1, 2)).mul_(1 / math.sqrt(head_dim)).softmax(-1)
    return torch.bmm(scores, values[0]).reshape(1, heads, 1, head_dim)


# -march level -> (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, the CPU flags it needs)
ISA_LEVELS = {
    "x86-64-v2": ("default", "SSE4_2", {"sse4_2", "popcnt"}),
    "x86-64-v3": ("avx2", "AVX2", {"avx2", "fma", "bmi2"}),
    "x86-64-v4": ("avx512", "AVX512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
}


def at_isa(level: str | None, argv: list[str]) -> None:
    """Re-run this script with the native ops, ATen and MKL all at `level` (returns where already so)."""
    if level is None or os.environ.get("STRATA_NATIVE_MARCH") == level:
        return
    if level not in ISA_LEVELS:
        sys.exit(f"--isa: {level!r} is not one of {', '.join(ISA_LEVELS)}")
    aten, mkl, needs = ISA_LEVELS[level]
    if missing := needs - set(cpu_flags()):
        sys.exit(f"--isa {level}: this CPU lacks {', '.join(sorted(missing))}, so it cannot run code of that level")
    env = {**os.environ, "STRATA_NATIVE_MARCH": level, "ATEN_CPU_CAPABILITY": aten, "MKL_ENABLE_INSTRUCTIONS": mkl}
    os.execve(sys.executable, [sys.executable, *argv], env)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arms alternate A, B, B, A, ... in one process; --repeats samples each after --warmup.",
    )
    p.add_argument("--model", default="strata-tiny-moe", help="whose config gives the head counts, head_dim and window")
    p.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (default 1, as the engine decodes on 2 cores)"
    )
    p.add_argument("--repeats", type=int, default=30, help="timed samples per arm (median and min shown)")
    p.add_argument("--warmup", type=int, default=4, help="untimed samples per arm first")
    p.add_argument(
        "--sample-ms", type=float, default=2.0, help="a sample is the mean of as many calls as take about this long"
    )
    p.add_argument("--keys", default="100,300,1024", help="section 1: comma-separated cached keys of the decode row")
    p.add_argument(
        "--chunks",
        default="32,64,128,256",
        help="section 2: comma-separated prompt chunk sizes (consecutive queries, each below the window)",
    )
    p.add_argument(
        "--start",
        type=int,
        default=2048,
        help="section 2: the chunk's first position (>= the window; every start past it sees the same keys)",
    )
    p.add_argument("--decode-rows", default="4,6", help="section 3: comma-separated decode rows in the micro-batch")
    p.add_argument(
        "--decode-positions",
        default="100,600,1500",
        help="section 3: comma-separated positions of the rows (row i at position + 3i)",
    )
    p.add_argument(
        "--chunk-starts",
        default="0,512,2048",
        help="section 4: comma-separated first positions of the chunks (any, inside the window or past it)",
    )
    p.add_argument(
        "--isa",
        choices=sorted(ISA_LEVELS),
        default=None,
        help="run as a machine of this x86-64 level: native ops, ATen and MKL all at it (default: this CPU's own)",
    )
    p.add_argument("--sections", default="1,2,3,4,5", help="comma-separated sections to run (default all)")
    p.add_argument(
        "--against",
        metavar="REV",
        help="sections 3-5: A = the native op as git revision REV had it (built here), B = this checkout's",
    )
    args = p.parse_args()
    at_isa(args.isa, sys.argv)
    _, config = load_model(args.model)
    window = config.sliding_window
    if window is not None and args.start < window:
        p.error(f"--start: {args.start} is inside the window ({window}); the band path needs start >= window")
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    print(
        f"{args.model}: {config.num_heads} query heads, {config.num_kv_heads} kv heads, head_dim {config.head_dim}, "
        f"window {window}; float32"
    )
    print(
        f"CPU {cpu_line()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"{args.repeats} alternating samples per arm after {args.warmup} warm-up"
    )
    print(
        f"ISA: native ops -march={os.environ.get('STRATA_NATIVE_MARCH', 'native')}, ATen "
        f"{torch.backends.cpu.get_cpu_capability()}, MKL {os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'its own choice')}"
    )
    sections = set(ints(args.sections))

    if 1 in sections:
        decode_row(config, window, args, generator)
    with torch.inference_mode():
        if 2 in sections:
            band_section(config, window, args, generator)
        if 3 in sections:
            decode_op(config, window, args, generator)
        if 4 in sections:
            chunk_op(config, window, args, generator)
        if 5 in sections:
            quant_decode_op(config, window, args, generator)


def decode_row(config, window: int | None, args, generator: torch.Generator) -> None:
    """Section 1: one decode row, the flash kernel against two bmm's and a softmax."""
    print("\n1. Decode attention of one row (one query): A = attend_row (flash), B = two bmm's and a softmax\n")
    print(header("keys", "A flash", "B bmm+softmax"))
    with torch.inference_mode():
        for length in ints(args.keys):
            q, keys, values, positions = row_inputs(config, 1, length, generator)
            seen_k, seen_v = (
                (keys, values) if window is None or length <= window else (keys[:, :, -window:], values[:, :, -window:])
            )  # what attend_row slices for a windowed decode
            arms = {
                "A": lambda: attend_row(q, keys, values, positions, True, window),
                "B": lambda: bmm_softmax(q, seen_k, seen_v),
            }
            ref = reference(q, keys, values, positions, torch.arange(length), window)
            errors = [max_diff(fn(), ref) for fn in arms.values()]
            print(row(f"{length:,}", alternate(arms, args.repeats, args.warmup, args.sample_ms), errors))


def band_section(config, window: int | None, args, generator: torch.Generator) -> None:
    """Section 2: the flash band path against the masked call, or why it is skipped."""
    print(
        "\n2. A prompt chunk past the window: A = the flash band path (three unmasked flash calls merged), "
        "B = attend_row's masked path (one masked call over every key the chunk sees; what non-consecutive "
        f"rows take), chunk starting at {args.start:,}\n"
    )
    chunks = ints(args.chunks)
    if window is None or flash_cpu is None or not all(1 < chunk < window for chunk in chunks):
        print(
            f"skipped: needs a sliding window larger than every chunk and the CPU flash op (window {window}, "
            f"chunks {chunks}, flash op {'present' if flash_cpu is not None else 'absent'})"
        )
    else:
        band_chunks(config, window, args, generator, chunks)


def band_chunks(config, window: int, args, generator: torch.Generator, chunks: list[int]) -> None:
    """Section 2: a chunk past the window, the flash band path against the masked call."""
    print(header("chunk (keys seen)", "A band + flash", "B masked"))
    for chunk in chunks:
        length = args.start + chunk
        q, keys, values, positions = row_inputs(config, chunk, length, generator)
        arms = {
            "A": lambda: band_window_chunk(q, keys, values, args.start, window),
            "B": lambda: attend_row(q, keys, values, positions, False, window),
        }
        low = args.start - window + 1
        ref = reference(q, keys[:, :, low:], values[:, :, low:], positions, torch.arange(low, length), window)
        errors = [max_diff(fn(), ref) for fn in arms.values()]
        print(row(f"{chunk:,} ({length - low:,})", alternate(arms, args.repeats, args.warmup, args.sample_ms), errors))


def chunk_op(config, window: int | None, args, generator: torch.Generator) -> None:
    """Section 4: a prompt chunk's attention, the flash paths (`attend_row`) against the native op (its hook);
    with --against, the native op at that revision against this one."""
    a_name, a_what = "A flash", "A = the flash paths (attend_row, no hook; STRATA_CHUNK_KERNEL=0)"
    if args.against:
        old = op_at(args.against, "chunk_attention.cpp", "strata_chunk_attention", "chunk_attention")
        a_name, a_what = f"A at {args.against}", f"A = the native chunk op as {args.against} had it"
    print(f"\n4. A prompt chunk's attention: {a_what}, B = the native chunk op (attend_row, as the engine calls it)\n")
    if native_chunk_attention() is None:
        print("skipped: the native chunk op could not be built here (the engine then uses the flash paths)")
        return
    print(header("chunk at start (multiply-adds)", a_name, "B native", bits=bool(args.against)))
    for start in ints(args.chunk_starts):
        for chunk in ints(args.chunks):
            length = start + chunk
            q, keys, values, positions = row_inputs(config, chunk, length, generator)
            arms = {
                "A": lambda: attend_row(q, keys, values, positions, True, window),
                "B": lambda: attend_row(q, keys, values, positions, True, window, chunk=attend_chunk),
            }
            if args.against:
                arms["A"] = lambda: attend_row(
                    q, keys, values, positions, True, window, chunk=functools.partial(attend_chunk, op=old)
                )
            ref = reference(q, keys, values, positions, torch.arange(length), window)
            errors = [max_diff(fn(), ref) for fn in arms.values()]
            seen = sum(min(p + 1, window or p + 1) for p in range(start, length))  # keys each query sees
            macs = 2 * seen * config.num_heads * config.head_dim
            print(
                row(
                    f"{chunk:,} at {start:,} ({macs / 1e6:.0f} M)",
                    alternate(arms, args.repeats, args.warmup, args.sample_ms),
                    errors,
                    same_bits(arms) if args.against else None,
                )
            )


def decode_op(config, window: int | None, args, generator: torch.Generator) -> None:
    """Section 3: the compiled step's decode attention op, ATen's per-row calls against the native op."""
    print(
        "\n3. The compiled step's decode attention op (a micro-batch padded to 8 rows, the KV writes included): "
        "A = its per-row ATen calls, B = the native op\n"
    )
    native = native_decode_attention()
    if native is None:
        print("skipped: the native op could not be built here (the engine then uses the per-row ATen calls)")
        return
    old, a_name = None, "A per-row ATen"
    if args.against:
        old = op_at(args.against, "decode_attention.cpp", "strata_decode_attention", "decode_attention")
        a_name = f"A at {args.against}"
        print(f"(with --against: A = the native op as {args.against} had it)\n")
    print(header("rows at position", a_name, "B native", bits=old is not None))
    for rows in ints(args.decode_rows):
        for base in ints(args.decode_positions):
            arms, errors = decode_batch_arms(config, window, rows, base, generator, native, old)
            samples = alternate(arms, args.repeats, args.warmup, args.sample_ms)
            print(row(f"{rows} at ~{base:,}", samples, errors, same_bits(arms) if old is not None else None))


def quant_decode_op(config, window: int | None, args, generator: torch.Generator) -> None:
    """Section 5: decode rows over a quantized cache, the write, dequantized window and flash call of each row
    against the native op (or, with --against, that op as the revision had it)."""
    native = native_quant_decode_attention()
    if native is None:
        print("\n5. skipped: the native quantized decode op could not be built here")
        return
    old = None
    a_name, a_what = "A dequantized + flash", "A = each row's write, its dequantized window and a flash call"
    if args.against:
        old = op_at(
            args.against, "quant_decode_attention.cpp", "strata_quant_decode_attention", "quant_decode_attention"
        )
        a_name, a_what = f"A at {args.against}", f"A = the native op as {args.against} had it"
    print(f"\n5. Decode rows over a quantized cache (their writes included): {a_what}, B = the native op\n")
    for fmt in ("q8", "k8v4"):
        print(header(f"{fmt}: rows at position", a_name, "B native", bits=old is not None))
        for rows in ints(args.decode_rows):
            for base in ints(args.decode_positions):
                arms, errors = quant_decode_arms(config, window, fmt, rows, base, generator, native, old)
                samples = alternate(arms, args.repeats, args.warmup, args.sample_ms)
                print(row(f"{rows} at ~{base:,}", samples, errors, same_bits(arms) if old is not None else None))


if __name__ == "__main__":
    main()
