"""A prompt chunk's attention as one native call: T consecutive queries of one row over the row's keys.

Contract: `native_chunk_attention()` returns the op, `op(q, keys, values, start, window)` with q [T, H, hd]
the queries at positions start..start+T-1, keys and values [Hkv, L, hd] (a slot of the KV cache, L >=
start + T, each key's hd floats contiguous), window the sliding window or -1 -> [T, H, hd], the query at p
over keys (p - window, p] (all of 0..p without a window); float32 on the CPU, hd 32, 64 or 128. None where
`STRATA_CHUNK_KERNEL=0` turns it off or it cannot be built here (build.py: once per machine, ~30 s,
said on stderr; the flash calls of model/attention.py serve then). `attend_chunk` is the hook that
choice.install sets on each of the model's attentions: the op on attend_row's shapes, or None.

Why: ATen's flash kernel runs a chunk's attention at ~18-25 GMAC/s at head_dim 32, and the windowed chunk
takes three of its calls and a merge. Here, per kv head: its keys transposed once; then per block of 8
query positions (the query heads of the kv head together) the scores of every key the block sees in
register tiles sized to the target (8 rows by 32 keys with AVX-512, 2 by 32 with AVX2), each row's softmax
over its own keys, and the weighted values. Lanes and the order of every sum are fixed, so a row's result
depends on its own query, keys and place in the chunk only. ~3e-7 from float64 math, not bitwise the flash
path's. Whether it serves is decided per machine by choice.py.
"""

from __future__ import annotations

import torch

from .build import native_op, native_source

ENV = "STRATA_CHUNK_KERNEL"  # 0 = the flash calls of model/attention.py

_SOURCE = native_source("chunk_attention.cpp")  # strata_engine/native/chunk_attention.cpp


def native_chunk_attention(march: str | None = None):
    """The built op, or None (turned off, or no build here: the reason once on stderr)."""
    return native_op(
        ENV,
        "strata_chunk_attention",
        _SOURCE,
        "chunk_attention",
        "prompt chunks use the flash calls of model/attention.py",
        march,
    )


def attend_chunk(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, window: int | None, op=None
) -> torch.Tensor | None:
    """The model's hook (`Attention.chunk_attention`, attend_row's `chunk`): q [1, H, T, hd] at the last T
    positions of keys and values [1, Hkv, L, hd] -> [1, H, T, hd] in one call of the op (`op`, default the one
    that serves here), or None where the op does not serve (its switch, the runtime's choice, no build) or
    does not take these shapes."""
    if not _fits(q, keys, values):
        return None
    op = op or native_chunk_attention()
    if op is None:
        return None
    tokens, length = q.shape[2], keys.shape[2]
    return op(q[0].transpose(0, 1), keys[0], values[0], length - tokens, -1 if window is None else window).transpose(
        0, 1
    )[None]


def _fits(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> bool:
    """The shapes the op takes: CPU, float32, hd 32/64/128, each key's hd floats contiguous."""
    head_dim = q.shape[3]
    return (
        q.device.type == "cpu"
        and q.dtype == keys.dtype == values.dtype == torch.float32
        and head_dim in (32, 64, 128)
        and keys.stride(3) == values.stride(3) == 1
        and keys.stride(2) == values.stride(2) == head_dim
    )
