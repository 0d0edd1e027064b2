"""A quantized KV cache's codec (q8, k8v4) as native calls: a row's positions stored, a window read back.

Contract: `native_kv_codec()` returns the op, a pair `(encode, decode)`: `encode(k, v, k_parts..., slot,
first)` stores float32 keys and values [T, Hkv, hd] at the slot's positions first..first+T-1 of the cache's
parts (`LayerKV.parts`: int8 keys and scales; int8 values and scales for q8, packed 4-bit values, scales and
mins for k8v4, an empty v_min for q8), bit for bit what `KVFormat.encode` stores; `decode(parts..., slot,
low, high)` returns float32 (k, v) [1, Hkv, high - low, hd], bit for bit `KVFormat.decode`'s. None where
`STRATA_KV_CODEC_KERNEL=0` turns it off, the runtime chose the Python path (choice.py), or it cannot be
built here (build.py). `CODEC` is the hook that choice.install sets on each attention
(`Attention.kv_codec`, passed to `LayerKV.write_row` and `LayerKV.read`): `write` and `read`, each the op
on a quantized cache or False / None (then the Python codec).

Why: the Python codec is ~10 small ATen calls a part, each a pass over a prompt chunk's rows or over the
window it reads. Here one pass a part, no temporaries, on one thread. The same bits either way, so whether it
serves is only a question of speed: raced against the Python codec like the other ops (choice.py), since
those ATen calls spread over the engine's threads where this op does not; the race (a chunk's write and its
window's read) costs milliseconds, once per machine.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .build import native_op, native_source

ENV = "STRATA_KV_CODEC_KERNEL"  # 0 = kv_format.py's Python encode and decode

_SOURCE = native_source("kv_codec.cpp")  # strata_engine/native/kv_codec.cpp

_EMPTY = torch.empty(0)  # q8's v_min


def native_kv_codec(march: str | None = None):
    """The built op (encode, decode), or None (turned off, or no build here: the reason once on stderr)."""
    return native_op(
        ENV,
        "strata_kv_codec",
        _SOURCE,
        "kv_codec",
        "a quantized cache's rows are stored and read by kv_format.py's Python codec",
        march,
    )


def _parts(kv) -> tuple[torch.Tensor, ...] | None:
    """The cache's parts in the op's order, or None where the op does not take them (not q8 / k8v4, not CPU)."""
    parts = kv.parts
    if "k_scale" not in parts or parts["k"].device.type != "cpu":
        return None
    return parts["k"], parts["k_scale"], parts["v"], parts["v_scale"], parts.get("v_min", _EMPTY)


def write(kv, slot: int, first: int, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Store k, v [T, Hkv, hd] at the slot's positions first..first+T-1 of `kv` (a model/kv_cache.LayerKV) in
    one call: True; False, nothing written, where the op does not serve or take these."""
    parts = _parts(kv)
    if parts is None or k.dtype != torch.float32 or v.dtype != torch.float32:
        return False
    op = native_kv_codec()
    if op is None:
        return False
    op[0](k, v, *parts, slot, first)
    return True


def read(kv, slot: int, low: int, high: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The slot's float32 keys and values at positions [low, high), [1, Hkv, high - low, hd], in one call; None
    where the op does not serve or take this cache."""
    parts = _parts(kv)
    if parts is None:
        return None
    op = native_kv_codec()
    if op is None:
        return None
    return op[1](*parts, slot, low, high)


class Codec(NamedTuple):
    write: object
    read: object


CODEC = Codec(write, read)
