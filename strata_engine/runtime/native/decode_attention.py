"""The decode rows' attention as one native call: every row's KV write and its attention over its own window.

Contract: `native_decode_attention()` returns the op, `op(q, k, v, k_cache, v_cache, slots, positions, window)`
with the shapes and meaning of `step_ops.decode_attention` (float32 on the CPU, contiguous caches), or
None where it cannot be built here (no C++ compiler, a build error: said once on stderr) or where
`STRATA_DECODE_KERNEL=0` turns it off. It is built the first time it is asked for (build.py:
g++ and ninja, ~20-40 s once, then loaded from torch's extension cache).

Why: a decode row's attention is a few thousand multiply-adds at the scenario's lengths, and ATen's per-row
flash call costs ~25-30 us of dispatch and set-up around them, 4-6 of them a layer (docs/measurements/decode-kernel.md, "The
decode attention kernel"); batched SDPA or matmul forms over a masked key block cost as much (the mask, the
key range of the widest row). Here each (row, head) is a loop over its own keys only: the dot products,
a max-subtracted softmax and the weighted sum of values, the query heads of a kv head reading the same
keys. A row's result depends on its own query and keys only, in a fixed order, so it is the same whatever
rows share the call; it is not bitwise ATen's flash result (a different summation order, ~1e-7 apart).
"""

from __future__ import annotations

from .build import native_op, native_source

ENV = "STRATA_DECODE_KERNEL"  # 0 = the per-row ATen calls

_SOURCE = native_source("decode_attention.cpp")  # strata_engine/native/decode_attention.cpp


def native_decode_attention(march: str | None = None):
    """The built op, or None (turned off, or no build here: the reason once on stderr)."""
    return native_op(
        ENV, "strata_decode_attention", _SOURCE, "decode_attention", "decode rows use ATen's per-row attention", march
    )
