"""The compiled decode step's routed experts as one native call: each decode row through its chosen experts only.

Contract: `native_decode_experts()` returns the op, `op(x, weights, experts, gate_up, down, slots)` with x [N, D]
float32 (rows whose slot is -1 are padding and give zeros), weights and experts [N, k] the router's top-k,
gate_up [E, 2I, D] and down [E, D, I] the experts' matrices (rows or columns contiguous) -> [N, D]: each chosen
expert's SwiGLU output times its router weight, summed per row in ascending expert order. None where
`STRATA_DECODE_EXPERTS_KERNEL=0` turns it off, the runtime's race chose the compiled every-expert path
(runtime/native/choice.py), or it cannot be built here (build.py: once per machine, said on stderr).

Why: the compiled step's graph has static shapes, so its MoE runs every expert on every row (8 where a row
chooses 2 on strata-tiny-moe) and reads every expert's weights each step; at a few rows that is most of the
step. Here a row reads only its experts' weights, the rows that chose an expert share each load of them, and
the dot products run in an order fixed by the shapes: a row's result is the same whatever rows share the call
(not bitwise ATen's GEMMs: another summation order). It runs on the calling thread: the fastest layout decodes
at one thread a stage, where ATen's GEMMs would split the every-expert work over the stage's threads.
"""

from __future__ import annotations

from .build import native_op, native_source

ENV = "STRATA_DECODE_EXPERTS_KERNEL"  # 0 = the compiled graph's every-expert MoE
NAME = "strata_decode_experts"

_SOURCE = native_source("decode_experts.cpp")  # strata_engine/native/decode_experts.cpp


def native_decode_experts(march: str | None = None):
    """The built op, or None (turned off, the race chose the graph's path, or no build here)."""
    return native_op(ENV, NAME, _SOURCE, "decode_experts", "the compiled step runs every expert on every row", march)
