#!/usr/bin/env python
"""The KV formats (--kv-dtype) side by side on the embedded model, on the plain layout's eager stage forward.

Per format: bytes per position (every layer's keys, values and scales); the anonymous memory one slot commits
when written to position --far (45,000) chunk by chunk with the stage's trim first (synthetic keys and values:
commit and trim do not depend on them); the median decode step at batch 1 and 6 with each slot's cache filled
to --at (4,096) positions; and the median read of a --chunk (2,048) token chunk at position --read-at (8,192).
Caches are filled with random keys and values (what attention costs does not depend on them); formats are
timed in turn, ABBA over --rounds, at --threads threads. `--positions A,B,...` adds the decode step at batch 1
and 6 with every slot at each of those positions (a slot far into the context holds only its window's share),
per format, as a ratio of speed to the first position's.

  .venv/bin/python benchmarks/bench_kv_formats.py --threads 1
  .venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --positions 2048,131000 --far 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's engine, not an installed one
from strata_engine.context_length import kv_bytes_per_token  # noqa: E402
from strata_engine.model import load_model  # noqa: E402
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.model.rows import Row  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile  # noqa: E402
from strata_engine.runtime.native import kv_codec, quant_decode_attention  # noqa: E402
from strata_engine.runtime.native.choice import install  # noqa: E402
from strata_engine.runtime.pipeline import Part  # noqa: E402
from strata_engine.runtime.stage_forward import stage_forward  # noqa: E402

FORMATS = ("f32", "bf16", "q8", "k8v4")


def anon_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon"))


def fill(cache: KVCache, slot: int, end: int, step: int = 2048) -> None:
    g = torch.Generator().manual_seed(slot)
    any_layer = next(iter(cache.layers.values()))
    heads, dim = any_layer.k.shape[1], any_layer.k.shape[3]
    for first in range(0, end, step):
        count = min(step, end - first)
        cache.trim([Row(slot, 0, count, first, first + count - 1, True)])
        k, v = torch.randn(count, heads, dim, generator=g), torch.randn(count, heads, dim, generator=g)
        for layer in cache.layers.values():
            layer.write_row(slot, first, k, v)


def committed(model, fmt: str, far: int) -> tuple[int, int]:
    """(RssAnon grown, the cache's own count: positions held from the lowest held_from x bytes a position)."""
    before = anon_bytes()
    cache = KVCache(model.config, num_slots=1, ctx=far + 1, kv_dtype=fmt)
    fill(cache, 0, far)
    grown = anon_bytes() - before
    c = model.config
    held = far - min(layer.held_from[0] for layer in cache.layers.values())
    del cache
    return grown, held * kv_bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, 4, fmt)


def timed(model, cache, rows, tile) -> float:
    part = Part.ragged(rows, want_logits=True)
    start = time.perf_counter()
    stage_forward(model, range(model.config.num_layers), cache, part, True, True, tile, "cpu")
    return time.perf_counter() - start


def decode_at_positions(model, tile, positions: list[int], steps: int, rounds: int) -> None:
    """The decode step (batch 1 and 6) with every slot at each position, formats and positions in ABBA order."""
    c = model.config
    caches, times = {}, {}
    for fmt in FORMATS:
        for pos in positions:
            caches[fmt, pos] = KVCache(c, num_slots=6, ctx=pos + steps + 1, kv_dtype=fmt)
            for slot in range(6):
                fill(caches[fmt, pos], slot, pos)
            times[fmt, pos] = {"b1": [], "b6": []}
    order = [(fmt, pos) for fmt in FORMATS for pos in positions]
    for r in range(rounds):
        for fmt, pos in order if r % 2 == 0 else order[::-1]:
            for batch, key in ((1, "b1"), (6, "b6")):
                for step in range(steps):
                    rows = [(s, pos + step, [65]) for s in range(batch)]
                    times[fmt, pos][key].append(timed(model, caches[fmt, pos], rows, tile))
    print(f"format  position  decode b1 ms  decode b6 ms  (x position {positions[0]}'s speed: b1, b6)")
    for fmt in FORMATS:
        base = {key: statistics.median(times[fmt, positions[0]][key]) for key in ("b1", "b6")}
        for pos in positions:
            m = {key: statistics.median(times[fmt, pos][key]) for key in ("b1", "b6")}
            print(
                f"{fmt:6}  {pos:8}  {m['b1'] * 1e3:12.2f}  {m['b6'] * 1e3:12.2f}  "
                f"({base['b1'] / m['b1']:.2f}x, {base['b6'] / m['b6']:.2f}x)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--far", type=int, default=45_000, help="position one slot is written to for the memory column")
    parser.add_argument("--at", type=int, default=4096, help="positions each slot holds for the decode step")
    parser.add_argument("--read-at", type=int, default=8192, help="where the timed chunk read starts")
    parser.add_argument("--chunk", type=int, default=2048, help="tokens in the timed chunk read")
    parser.add_argument("--steps", type=int, default=20, help="decode steps per timed sample")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds over the formats")
    parser.add_argument(
        "--positions", default="", help="also decode with every slot at each of these positions, e.g. 2048,131000"
    )
    args = parser.parse_args()
    try:
        positions = [int(p) for p in args.positions.split(",") if p]
    except ValueError:
        parser.error(f"--positions takes comma-separated integers, got {args.positions!r}")
    torch.set_num_threads(args.threads)
    model = load_model("strata-tiny-moe")[0].eval()
    install(model)  # the native ops where they serve (an f32 cache's chunk attention, if this machine chose it)
    c = model.config
    tile = default_row_tile(c, "cpu", torch.float32, args.threads)
    apply_row_tile(model, tile)
    served = {
        "quantized decode": quant_decode_attention.native_quant_decode_attention(),
        "kv codec": kv_codec.native_kv_codec(),
    }
    print(
        f"threads {args.threads}, row tile {tile}, torch {torch.__version__}; q8/k8v4 ops: "
        + ", ".join(f"{name} {'native' if op is not None else 'aten'}" for name, op in served.items())
    )
    caches, times = {}, {fmt: {"b1": [], "b6": [], "read": []} for fmt in FORMATS}
    with torch.inference_mode():
        for fmt in FORMATS:
            per = kv_bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, 4, fmt)
            rss, count = committed(model, fmt, args.far)
            print(
                f"{fmt}: {per} B a position; at {args.far}: RssAnon +{rss / 2**20:.1f} MiB, held {count / 2**20:.1f} MiB"
            )
            caches[fmt] = KVCache(c, num_slots=7, ctx=args.read_at + args.chunk + 1, kv_dtype=fmt)
            for slot in range(6):
                fill(caches[fmt], slot, args.at)
            fill(caches[fmt], 6, args.read_at)
        for r in range(args.rounds):
            for fmt in FORMATS if r % 2 == 0 else FORMATS[::-1]:
                cache = caches[fmt]
                for batch, key in ((1, "b1"), (6, "b6")):
                    for step in range(args.steps):
                        rows = [(s, args.at + step, [65]) for s in range(batch)]
                        times[fmt][key].append(timed(model, cache, rows, tile))
                times[fmt]["read"].append(timed(model, cache, [(6, args.read_at, [66] * args.chunk)], tile))
    base = {key: statistics.median(times["f32"][key]) for key in ("b1", "b6", "read")}
    print("format  decode b1 ms  decode b6 ms  read ms  (x f32 speed: b1, b6, read)")
    for fmt in FORMATS:
        m = {key: statistics.median(times[fmt][key]) for key in ("b1", "b6", "read")}
        print(
            f"{fmt:6}  {m['b1'] * 1e3:12.2f}  {m['b6'] * 1e3:12.2f}  {m['read'] * 1e3:7.0f}  "
            f"({base['b1'] / m['b1']:.2f}x, {base['b6'] / m['b6']:.2f}x, {base['read'] / m['read']:.2f}x)"
        )
    if positions:
        with torch.inference_mode():
            decode_at_positions(model, tile, positions, args.steps, args.rounds)


if __name__ == "__main__":
    main()
