"""The routed experts' loop as one native call: `MoE._routed` in C++ over ATen's own ops, the GIL released.

Contract: `native_routed_experts()` returns the op, `op(x, weights, experts, gate_up, down, row_tile)` with x
[N, D] (the call's rows, padding last), weights [n, k] and experts [n, k] (int64) the router's top-k of the
first n <= N rows, gate_up [E, 2I, D] and down [E, D, I] the experts' matrices -> [N, D]: each chosen
expert's SwiGLU output on its rows, times the router weight, summed per row in ascending expert order
(padding rows 0). CPU tensors only. None where `STRATA_EXPERT_KERNEL=0` turns it off or it cannot be built
here (build.py: once per machine, ~30 s, said on stderr); `MoE._routed`'s Python loop serves then.
`run_routed` is the hook that choice.install sets on each of the model's MoE layers: the op's output, or None.

Why: the loop is ~12 small ATen calls per expert (gather, pad, two GEMMs, the activation, the weights, the
scatter), each a Python-to-ATen dispatch of several microseconds, ~100 a layer for a 256-token chunk of the
embedded model, around GEMMs of ~100 us: a tenth to a fifth of a read's time, held under the GIL that the
stage threads share. Here the same calls run from C++ (`at::linear`, `at::silu`, `index_add_`: the same
kernels on the same shapes, so every output is bitwise the Python loop's) with the GIL released, so the
other stage thread's Python runs meanwhile.
"""

from __future__ import annotations

import torch

from .build import native_op, native_source

ENV = "STRATA_EXPERT_KERNEL"  # 0 = the Python loop of MoE._routed

_SOURCE = native_source("routed_experts.cpp")  # strata_engine/native/routed_experts.cpp


def native_routed_experts(march: str | None = None):
    """The built op, or None (turned off, or no build here: the reason once on stderr)."""
    return native_op(
        ENV,
        "strata_routed_experts",
        _SOURCE,
        "routed_experts",
        "MoE layers run their experts in the Python loop of model/transformer.py",
        march,
    )


def run_routed(
    x: torch.Tensor,
    weights: torch.Tensor,
    experts: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    row_tile: int,
) -> torch.Tensor | None:
    """The model's hook (`MoE.routed_experts`): the op's output, or None where it does not serve (its switch,
    the runtime's choice, no build) or the tensors are not on the CPU; `MoE._routed`'s loop serves then."""
    op = native_routed_experts() if x.device.type == "cpu" else None
    return None if op is None else op(x, weights, experts, gate_up_proj, down_proj, row_tile)
