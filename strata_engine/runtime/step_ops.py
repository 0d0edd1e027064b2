"""The compiled decode step's opaque ops, registered as `torch.ops.strata.*`: what its graph calls per layer.

Contract: `strata::decode_attention(q, k, v, k_cache, v_cache, slots, positions, window)`: each decode row's key
and value written at (slot, position), then its attention over the slot's positions (the native op,
runtime/native/decode_attention.py, where it serves; else ATen's calls). `strata::decode_experts(x, weights,
experts, gate_up, down, slots)`: each row through its chosen experts only (runtime/native/decode_experts.py; a
graph calls it only where the op served when it was traced). Padding rows (slot -1) give zeros. Each has a Meta
kernel, so torch.compile traces its shape without running it.
"""

from __future__ import annotations

import torch

from ..model.attention import attend_row
from .native.decode_attention import native_decode_attention
from .native.decode_experts import native_decode_experts


# Registered with torch.library's low-level API: a call cost ~10 µs of dispatch where a
# `torch.library.custom_op` cost ~33 µs (a one-off timing here), and the step makes one call per layer.
_LIBRARY = torch.library.Library("strata", "DEF")
_LIBRARY.define(
    "decode_attention(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor slots, "
    "Tensor positions, int window) -> Tensor"
)


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    native: bool = True,
) -> torch.Tensor:
    """q [N, H, hd], k and v [N, Hkv, hd] of N decode rows (slot -1 = padding, after the rows): write each
    row's key and value at (slot, position), attend over the slot's positions 0..position; padding rows
    give zeros. On the CPU in float32 the native op does it all in one call (runtime/native/decode_attention.py);
    else, or with `native=False` (the native op's measure), ATen's calls: the writes as one indexed copy per
    cache (one op instead of two a row), and each row's attention over a view of its slot (`attend_row`): the
    op's own cost was ~30 us a row against ~26 us of attention."""
    op = native_decode_attention() if native and q.dtype == torch.float32 and q.device.type == "cpu" else None
    if op is not None and k_cache.is_contiguous() and v_cache.is_contiguous():
        return op(q, k, v, k_cache, v_cache, slots, positions, window)
    out = torch.zeros_like(q)
    at = positions.tolist()
    rows = [slot for slot in slots.tolist() if slot >= 0]  # the real rows' slots, in order
    real = len(rows)
    if real == 0:
        return out
    k_cache[slots[:real], :, positions[:real]] = k[:real]  # [real, Hkv, hd] at (slot, :, position) each
    v_cache[slots[:real], :, positions[:real]] = v[:real]
    grouped = q[:real].unsqueeze(2)  # [real, H, 1, hd]: row i is grouped[i : i + 1]
    for i, slot in enumerate(rows):
        end = at[i] + 1
        o = attend_row(
            grouped[i : i + 1],
            k_cache[slot : slot + 1, :, :end],
            v_cache[slot : slot + 1, :, :end],
            positions[i : i + 1],
            True,
            None if window < 0 else window,
        )
        out[i] = o[0, :, 0]
    return out


def _shape_only(q, k, v, k_cache, v_cache, slots, positions, window):
    return torch.empty_like(q)


_LIBRARY.impl("decode_attention", decode_attention, "CompositeExplicitAutograd")
_LIBRARY.impl("decode_attention", _shape_only, "Meta")

_LIBRARY.define(
    "decode_experts(Tensor x, Tensor weights, Tensor experts, Tensor gate_up, Tensor down, Tensor slots) -> Tensor"
)


def decode_experts(x, weights, experts, gate_up, down, slots):
    """Each decode row (slot -1 = padding: zeros) through its chosen experts only: the native op
    (runtime/native/decode_experts.py), which a graph calls only where it was built when the graph was traced."""
    op = native_decode_experts()
    if op is None:
        raise RuntimeError("the compiled step's graph calls the native decode experts, which no longer serve")
    return op(x, weights, experts, gate_up, down, slots)


def _experts_shape(x, weights, experts, gate_up, down, slots):
    return torch.empty_like(x)


_LIBRARY.impl("decode_experts", decode_experts, "CompositeExplicitAutograd")
_LIBRARY.impl("decode_experts", _experts_shape, "Meta")
