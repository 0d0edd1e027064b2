"""Decode rows' writes and attention straight on a quantized KV cache (q8, k8v4): one native call a layer.

Contract: `native_quant_decode_attention()` returns the op, `op(q, k_new, v_new, k, k_scale, v, v_scale,
v_min, slots, lows, highs)`: q [R, H, hd] float32 (one query a row); the rows' new keys and values [R, Hkv,
hd], stored at high - 1 as kv_format.py's encode stores them, bit for bit, before any row attends; the
cache's parts as `LayerKV.parts` holds them (int8 keys [S, Hkv, ctx, hd] and scales [S, Hkv, ctx]; int8
values and scales for q8, packed 4-bit values [S, Hkv, ctx, hd/2] with scales and mins for k8v4, an empty
v_min for q8); per row its slot and key range [low, high) (lists of ints) -> [R, H, hd]. hd 32, 64 or 128,
on the CPU. None where `STRATA_QUANT_DECODE_KERNEL=0` turns it off, the runtime chose ATen's path
(choice.py), or it cannot be built here (build.py: once per machine, said on stderr). `attend_decode` is the
hook that choice.install sets on each attention (`Attention.decode_attention`): the op on the model's rows,
or None (then `LayerKV.write_row`, `LayerKV.read`'s dequantized copy and model/attention.py's ATen calls).

Why: ATen's path quantizes a decode row's key and value in ~25 small calls a layer, then rebuilds a float32
copy of the row's whole window (the stored integers times their scales, several passes) and attends over
it; the writes and the copy cost more than the attention. Here each (row, head) reads the stored bytes once:
a key's integers widened to float inside the dot product, times the key's scale; a value's integers times
the key's weight and scale inside the weighted sum (k8v4: each min times its weight summed apart, a byte's
low and high nibbles summed apart and interleaved once). A row's result depends on its own query and keys
only, in a fixed order, so it is the same whatever rows share the call; ~1e-7 from float64 math on the
dequantized values, not bitwise ATen's path.
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


def attend_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv, spans: list[tuple[int, int, int]]):
    """The model's hook: q [R, H, hd], one query a row, and the rows' new keys and values k, v [R, Hkv, hd],
    over `kv` (a quantized model/kv_cache.LayerKV), spans [(slot, low, high)] a row: stores each row's key and
    value at high - 1 (bitwise `LayerKV.write_row`'s) -> [R, H, hd], in one call of the op; or None, nothing
    written, where it does not serve (its switch, the runtime's choice, no build) or take these shapes."""
    parts = kv.parts
    if not fits(q, parts):
        return None
    op = native_quant_decode_attention()
    if op is None:
        return None
    slots, lows, highs = (list(column) for column in zip(*spans))
    v_min = parts.get("v_min", _EMPTY)
    out = op(q, k, v, parts["k"], parts["k_scale"], parts["v"], parts["v_scale"], v_min, slots, lows, highs)
    for slot, high in zip(slots, highs):  # what the slot holds from, as write_row keeps it (trim, save)
        kv.held_from[slot] = min(kv.held_from[slot], high - 1)
    return out
