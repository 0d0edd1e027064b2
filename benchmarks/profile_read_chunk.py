#!/usr/bin/env python
"""Where one prompt chunk's read goes: torch.profiler over the engine's own stage forward, per core.

Reads --start tokens of real Python source into one slot (in 512-token chunks, untimed), then times
--repeats reads of one --chunk-token chunk at position --start through `runtime.stage_forward` (what a
stage thread or rank runs on a prompt chunk; the engine's row tile), at --threads threads; every repeat
writes the same KV positions again, so each read is the same read. Prints the CPU, the chunk's median and
best time, tokens per second, the labelled modules' shares (attention with its projections, MoE, norms;
labels from profile_decode_step.py) and the top aten ops with their share of the profiled chunk, so the
attention kernel's and the GEMMs' parts of a read can be read off.

--compare-attention instead times the chunk with each of the two attention paths of model/attention.py, the
flash calls (`STRATA_CHUNK_KERNEL=0`) and the native chunk op, alternating read by read in this process,
and prints each path's median chunk, the attention calls' share of it, and native/flash. --compare-experts does
the same for the routed experts: `MoE._routed`'s Python loop (`STRATA_EXPERT_KERNEL=0`) against the native
op of runtime/native/routed_experts.py.

  .venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048
  .venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-attention
  .venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-experts
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_decode_step import label_modules  # noqa: E402
from strata_bench.provenance import cpu_line  # noqa: E402
from strata_engine.model import attention, load_model, transformer  # noqa: E402
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile  # noqa: E402
from strata_engine.runtime.native import chunk_attention, routed_experts  # noqa: E402
from strata_engine.runtime.native.choice import install  # noqa: E402
from strata_engine.runtime.pipeline import Part  # noqa: E402
from strata_engine.runtime.stage_forward import stage_forward  # noqa: E402


def source_tokens(count: int) -> list[int]:
    """Bytes of the standard library's own source (the byte-level model's kind of text), `count` of them."""
    text = Path(argparse.__file__).read_bytes() + Path(statistics.__file__).read_bytes()
    while len(text) < count:
        text += text
    return list(text[:count])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunk", type=int, default=256, help="tokens in the timed chunk (the engine's --prefill-chunk)")
    p.add_argument("--start", type=int, default=2048, help="the chunk's first position (tokens read before it)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (a stage rank reads at 1 here)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--top", type=int, default=10, help="aten ops listed")
    p.add_argument(
        "--compare-attention",
        action="store_true",
        help="time the chunk with the flash calls and with the native chunk op, alternating (no profile)",
    )
    p.add_argument(
        "--compare-experts",
        action="store_true",
        help="time the chunk with the routed experts' Python loop and with the native op, alternating (no profile)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, config = load_model("strata-tiny-moe")
    install(model)  # the native ops where the engine serves them
    tile = default_row_tile(config, "cpu", torch.float32, args.threads)
    apply_row_tile(model, tile)
    label_modules(model)
    layers = range(config.num_layers)
    kv = KVCache(config, num_slots=1, ctx=args.start + args.chunk + 1)
    tokens = source_tokens(args.start + args.chunk)
    with torch.inference_mode():
        for first in range(0, args.start, 512):
            ids = tokens[first : min(first + 512, args.start)]
            stage_forward(model, layers, kv, Part.ragged([(0, first, ids)], False), True, True, tile, "cpu")

        def read() -> None:
            part = Part.ragged([(0, args.start, tokens[args.start :])], True)
            stage_forward(model, layers, kv, part, True, True, tile, "cpu")

        for _ in range(3):
            read()
        if args.compare_attention or args.compare_experts:
            return compare_kernel(read, args, tile, "attention" if args.compare_attention else "experts")
        took = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            read()
            took.append(time.perf_counter() - start)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.repeats):
                with record_function("@chunk"):
                    read()
    median, best = statistics.median(took), min(took)
    print(f"CPU {cpu_line()}, torch {torch.__version__}, {args.threads} thread(s), row tile {tile}")
    print(
        f"chunk of {args.chunk} at position {args.start} (window {config.sliding_window}): {median * 1e3:.2f} ms "
        f"median, {best * 1e3:.2f} best; {args.chunk / median:.0f} tok/s"
    )
    events = prof.key_averages()
    whole = next((e.cpu_time_total for e in events if e.key == "@chunk"), 0.0) or 1.0
    print(f"profiled chunk: {whole / args.repeats / 1e3:.2f} ms")
    for e in sorted(
        (e for e in events if e.key.startswith("@") and e.key != "@chunk"), key=lambda e: -e.cpu_time_total
    ):
        print(f"  {e.key[1:]:<40} {e.cpu_time_total / whole:6.1%}")
    ops = sorted((e for e in events if not e.key.startswith("@")), key=lambda e: -e.self_cpu_time_total)[: args.top]
    for e in ops:
        print(f"  aten {e.key:<50} {e.self_cpu_time_total / whole:6.1%}  x{e.count // args.repeats}")


KERNELS = {  # --compare-X: the env switch, what the ATen path is called, and the call timed inside the chunk
    "attention": (chunk_attention.ENV, "flash", attention, "attend_row", "its 4 attention calls"),
    "experts": (routed_experts.ENV, "python", transformer.MoE, "_routed", "its 4 routed-expert calls"),
}


def compare_kernel(read, args, tile: int, kernel: str) -> None:
    """Each read timed whole and in the kernel's calls, the ATen path and the native op alternating (aten,
    native, native, aten, ...), switched by the op's environment variable (read at every call)."""
    env, aten, owner, attr, calls_label = KERNELS[kernel]
    os.environ[env] = "1"  # forced: this machine's kept verdict may serve ATen, and the comparison needs both
    if (
        chunk_attention.native_chunk_attention if kernel == "attention" else routed_experts.native_routed_experts
    )() is None:
        sys.exit(f"--compare-{kernel}: the native op could not be built here")
    spent: list[float] = []
    original = getattr(owner, attr)

    def timed(*a, **k):
        start = time.perf_counter()
        out = original(*a, **k)
        spent.append(time.perf_counter() - start)
        return out

    took: dict[str, list[float]] = {aten: [], "native": []}
    calls: dict[str, list[float]] = {aten: [], "native": []}
    setattr(owner, attr, timed)
    try:
        for i in range(args.repeats * 2):
            name = (aten, "native")[(i + i // 2) % 2]
            os.environ[env] = "0" if name == aten else "1"
            spent.clear()
            start = time.perf_counter()
            read()
            took[name].append(time.perf_counter() - start)
            calls[name].append(sum(spent))
    finally:
        setattr(owner, attr, original)
        os.environ.pop(env, None)
    print(
        f"CPU {cpu_line()}, torch {torch.__version__}, "
        f"{args.threads} thread(s), row tile {tile}; {args.repeats} reads each, alternating"
    )
    print(f"| chunk of {args.chunk} at {args.start} | chunk, median ms | {calls_label}, median ms |\n|---|---:|---:|")
    for name in took:
        print(f"| {name} | {statistics.median(took[name]) * 1e3:.1f} | {statistics.median(calls[name]) * 1e3:.1f} |")
    ratio = statistics.median(took["native"]) / statistics.median(took[aten])
    print(
        f"native / {aten}, the chunk: {ratio:.2f}; the calls: "
        f"{statistics.median(calls['native']) / statistics.median(calls[aten]):.2f}"
    )


if __name__ == "__main__":
    main()
