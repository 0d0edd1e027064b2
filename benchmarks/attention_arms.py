"""The measuring half of bench_attention.py: arms timed alternating in one process, a float64 reference,
the markdown rows, a native op built as another git revision had it (`--against`), and the decode ops'
arms over a micro-batch of cached rows with their errors (sections 3 and 5)."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_engine.kernel_switches import native_march  # noqa: E402
from strata_engine.model.attention import attend_row  # noqa: E402
from strata_engine.model.kv_cache import LayerKV  # noqa: E402
from strata_engine.runtime import step_ops  # noqa: E402
from strata_engine.runtime.native.build import build_from  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def calls_per_sample(fn: Callable[[], object], sample_ms: float) -> int:
    """How many calls make one sample of ~sample_ms (at least one), from a short timed run."""
    start, calls = time.perf_counter(), 0
    while calls < 3 or time.perf_counter() - start < sample_ms / 1e3:
        fn()
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    return max(1, round(sample_ms / 1e3 / per_call))


def alternate(
    arms: dict[str, Callable[[], object]], repeats: int, warmup: int, sample_ms: float
) -> dict[str, list[float]]:
    """µs per call of each arm, one sample per arm per repeat, the order flipped every repeat (A, B, B, A, ...)."""
    names = list(arms)
    calls = {name: calls_per_sample(fn, sample_ms) for name, fn in arms.items()}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            fn, n = arms[name], calls[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            if i >= warmup:
                samples[name].append((time.perf_counter() - start) / n * 1e6)
    return samples


def reference(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    positions: torch.Tensor,
    key_positions: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """float64 softmax(q k^T / sqrt(hd) + mask) v, the query at p seeing keys (p - window, p]: [1, H, T, hd]."""
    heads, kv_heads, head_dim = q.shape[1], keys.shape[1], q.shape[3]
    q64 = q[0].double()
    k64 = keys[0].double().repeat_interleave(heads // kv_heads, dim=0)
    v64 = values[0].double().repeat_interleave(heads // kv_heads, dim=0)
    scores = q64 @ k64.transpose(1, 2) / math.sqrt(head_dim)  # [H, T, L]
    seen = key_positions[None, :] <= positions[:, None]
    if window is not None:
        seen &= key_positions[None, :] > positions[:, None] - window
    scores = scores.masked_fill(~seen, float("-inf"))
    return (scores.softmax(-1) @ v64)[None]


def row_inputs(config, queries: int, length: int, generator: torch.Generator):
    """q [1, H, T, hd] (a transposed view, as the engine passes it) at the last T positions of a row of
    `length` keys, and that row's keys and values as views of a cache with spare room after them."""
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    q = torch.randn(queries, heads, head_dim, generator=generator).transpose(0, 1)[None]
    k_cache, v_cache = (torch.randn(2, kv_heads, length + 64, head_dim, generator=generator) for _ in range(2))
    positions = torch.arange(length - queries, length)
    return q, k_cache[:1, :, :length], v_cache[:1, :, :length], positions


def row(shape: str, samples: dict[str, list[float]], errors: list[float], same: bool | None = None) -> str:
    (a, sa), (b, sb) = samples.items()
    ma, mb = statistics.median(sa), statistics.median(sb)
    bits = "" if same is None else f" {'yes' if same else '**no**'} |"
    return (
        f"| {shape} | {ma:.1f} / {min(sa):.1f} | {mb:.1f} / {min(sb):.1f} | {mb / ma:.2f} "
        f"| {errors[0]:.1e} | {errors[1]:.1e} |{bits}"
    )


def header(first: str, a: str, b: str, bits: bool = False) -> str:
    return (
        f"| {first} | {a}: median / min µs | {b}: median / min µs | B/A | max abs diff A vs float64 "
        f"| B vs float64 |{' A, B same bits |' if bits else ''}\n|---|---:|---:|---:|---:|---:|{'---|' if bits else ''}"
    )


def op_at(rev: str, file: str, name: str, function: str):
    """The native op `function` of strata_engine/native/`file` as git revision `rev` had it, built here at
    this level (`STRATA_NATIVE_MARCH`); exits naming what is missing where that revision lacks the file."""

    def show(path: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"--against {rev}: git cannot show {path} there: {done.stderr.strip()}")
        return done.stdout

    op = build_from(
        name, show("strata_engine/native/preamble.h"), show(f"strata_engine/native/{file}"), function, native_march()
    )
    if op is None:
        sys.exit(f"--against {rev}: its {file} did not build here (above)")
    return op


def same_bits(arms: dict[str, Callable[[], torch.Tensor]]) -> bool:
    """Whether the two arms' outputs are equal bit for bit (NaNs in the same places count as equal)."""
    a, b = (fn() for fn in arms.values())
    return bool(torch.equal(a.view(torch.int32), b.view(torch.int32)))


def max_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).abs().max())


def decode_batch_arms(config, window: int | None, rows: int, base: int, generator: torch.Generator, native, old=None):
    """Section 3's arms: `rows` decode rows at ~base (row i at base + 3i), a micro-batch padded to 8 over a
    cache, A = the per-row ATen calls (or `old`, the op as another revision had it), B = the native op; and
    each arm's largest difference from float64 math over a row's own keys (written by the call)."""
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    at = [base + 3 * i for i in range(rows)]
    ctx = max(at) + 64
    caches = [torch.randn(rows, kv_heads, ctx, head_dim, generator=generator) for _ in range(2)]
    q, k, v = (torch.randn(8, h, head_dim, generator=generator) for h in (heads, kv_heads, kv_heads))
    slots, positions = torch.tensor(list(range(rows)) + [-1] * (8 - rows)), torch.tensor(at + [0] * (8 - rows))
    w = -1 if window is None else window
    arms = {
        "A": lambda: step_ops.decode_attention(q, k, v, *caches, slots, positions, w, native=False),
        "B": lambda: native(q, k, v, *caches, slots, positions, w),
    }
    if old is not None:
        arms["A"] = lambda: old(q, k, v, *caches, slots, positions, w)
    errors = []
    for fn in arms.values():  # every row against plain float64 math over its own keys (written by the call)
        out = fn()
        errors.append(
            max(
                max_diff(
                    out[i : i + 1].transpose(0, 1)[None],
                    reference(
                        q[i : i + 1].transpose(0, 1)[None],
                        caches[0][i : i + 1, :, : at[i] + 1],
                        caches[1][i : i + 1, :, : at[i] + 1],
                        positions[i : i + 1],
                        torch.arange(at[i] + 1),
                        window,
                    ),
                )
                for i in range(rows)
            )
        )
    return arms, errors


def quant_decode_arms(
    config, window: int | None, fmt: str, rows: int, base: int, generator: torch.Generator, native, old=None
):
    """Section 5's arms: `rows` decode rows at ~base over a `fmt` quantized cache, A = each row's write, its
    dequantized window and a flash call (or `old`, the op as another revision had it), B = the native op; and
    each arm's largest difference from float64 math over the stored keys."""
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    at = [base + 3 * i for i in range(rows)]
    kv = LayerKV(rows, kv_heads, max(at) + 64, head_dim, torch.float32, "cpu", None, fmt)
    for slot, high in enumerate(at):
        keys, values = (torch.randn(high, kv_heads, head_dim, generator=generator) for _ in "kv")
        kv.write_row(slot, 0, keys, values)
    q = torch.randn(rows, heads, head_dim, generator=generator)
    k, v = (torch.randn(rows, kv_heads, head_dim, generator=generator) for _ in "kv")
    spans = [(slot, max(0, high + 1 - (window or high + 1)), high + 1) for slot, high in enumerate(at)]
    slots, lows, highs = (list(column) for column in zip(*spans))
    parts = kv.parts
    v_min = parts.get("v_min", torch.empty(0))

    def call(op):
        return op(q, k, v, parts["k"], parts["k_scale"], parts["v"], parts["v_scale"], v_min, slots, lows, highs)

    def aten():
        out = []
        for i, (slot, low, high) in enumerate(spans):
            kv.write_row(slot, high - 1, k[i : i + 1], v[i : i + 1])
            keys, values = kv.read(slot, low, high)
            out.append(attend_row(q[i : i + 1].transpose(0, 1)[None], keys, values, torch.tensor([high - 1]), False))
        return torch.cat([o[0].transpose(0, 1) for o in out])

    arms = {"A": (lambda: call(old)) if old is not None else aten, "B": lambda: call(native)}
    arms["B"]()  # the rows' new keys and values stored (every arm stores the same bits), then the reference
    ref = torch.stack(
        [
            reference(
                q[i : i + 1].transpose(0, 1)[None],
                *kv.read(slot, low, high),
                torch.tensor([high - 1]),
                torch.arange(low, high),
                None,
            )[0, :, 0]
            for i, (slot, low, high) in enumerate(spans)
        ]
    )
    return arms, [max_diff(fn(), ref) for fn in arms.values()]
