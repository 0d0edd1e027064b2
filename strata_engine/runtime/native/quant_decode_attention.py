"""Decode rows' attention read straight from a quantized KV cache (q8, k8v4): one native call a layer.

Contract: `native_quant_decode_attention()` returns the op, `op(q, k, k_scale, v, v_scale, v_min, slots, lows,
highs)` with q [R, H, hd] float32 (one query a row), the cache's parts as `LayerKV.parts` holds them (int8
keys [S, Hkv, ctx, hd] and their scales [S, Hkv, ctx]; int8 values and scales for q8, packed 4-bit values
[S, Hkv, ctx, hd/2] with scales and mins for k8v4, an empty v_min for q8) and per row its slot and key range
[low, high) (lists of ints) -> [R, H, hd]; hd 32, 64 or 128, on the CPU. None where `STRATA_QUANT_DECODE_KERNEL=0` turns it
off, the runtime chose ATen's path (choice.py), or it cannot be built here (build.py: once per machine, said
on stderr). `attend_decode` is the hook that choice.install sets on each attention
(`Attention.decode_attention`): the op on the model's rows, or None (then `LayerKV.read`'s dequantized copy
and model/attention.py's ATen calls serve).

Why: ATen's path rebuilds a float32 copy of each decode row's whole window every layer and step (the
stored integers times their scales, several tensors' worth of passes), then attends over it; the copy costs
more than the attention. Here each (row, head) reads the stored bytes once: a key's integers times the query
inside the dot product, times the key's scale; a value's integers times the key's weight and scale inside
the weighted sum (k8v4: each min times its weight summed apart, and the bytes' low and high nibbles summed
apart and interleaved once). A row's result depends on its own query and keys only, in a fixed order, so it
is the same whatever rows share the call; ~1e-7 from float64 math on the dequantized values, not bitwise
ATen's path.
"""

from __future__ import annotations

import torch

from .build import native_op, native_source

ENV = "STRATA_QUANT_DECODE_KERNEL"  # 0 = the dequantized window copy and ATen's attention

_SOURCE = native_source("quant_decode_attention.cpp")  # strata_engine/native/quant_decode_attention.cpp


def native_quant_decode_attention(march: str | None = None):
    """The built op, or None (turned off, or no build here: the reason once on stderr)."""
    return native_op(
        ENV,
        "strata_quant_decode_attention",
        _SOURCE,
        "quant_decode_attention",
        "decode rows of a quantized cache read its dequantized window with ATen's attention",
        march,
    )


_EMPTY = torch.empty(0)  # q8's v_min


_EMPTY = torch.empty(0)  # q8's v_min


def fits(q: torch.Tensor, parts: dict[str, torch.Tensor]) -> bool:
    """The shapes the op takes: a q8 or k8v4 cache on the CPU, float32 queries, hd 32/64/128."""
    return (
        q.device.type == "cpu"
        and q.dtype == torch.float32
        and q.shape[-1] in (32, 64, 128)
        and parts["k"].dtype == torch.int8
        and "k_scale" in parts
        and parts["k"].device.type == "cpu"
    )


def attend_decode(q: torch.Tensor, parts: dict[str, torch.Tensor], spans: list[tuple[int, int, int]]):
    """The model's hook: q [R, H, hd], one query a row, over `parts` (a quantized `LayerKV.parts`) with
    spans [(slot, low, high)] a row -> [R, H, hd] in one call of the op, or None where it does not serve (its
    switch, the runtime's choice, no build) or does not take these shapes."""
    if not fits(q, parts):
        return None
    op = native_quant_decode_attention()
    if op is None:
        return None
    slots, lows, highs = (list(column) for column in zip(*spans))
    v_min = parts.get("v_min", _EMPTY)
    return op(q, parts["k"], parts["k_scale"], parts["v"], parts["v_scale"], v_min, slots, lows, highs)
