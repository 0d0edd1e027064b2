"""The measuring half of bench_attention.py: arms timed alternating in one process, a float64 reference,
the markdown rows, and a native op built as another git revision had it (`--against`)."""

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
