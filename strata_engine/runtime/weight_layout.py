"""The weights' memory layout for CPU GEMMs: the same shapes and values, stored row- or column-major.

Contract: `gemm_layout(model, column_major)` re-lays, in place, every linear weight and every MoE expert's
matrices that sit on the CPU in float32, and returns how many tensors moved. Column-major: each `[N, K]`
weight is the transpose of a contiguous `[K, N]` tensor (the experts' fused `[E, 2I, D]` gate/up tensor:
of one contiguous `[D, E * 2I]`, so the every-expert path still views it as one `[E * 2I, D]` matrix);
row-major: contiguous, as loaded. The model code does not change: it calls `F.linear(x, W)` as before.

Why: `F.linear(x, W)` computes `x @ W.T`; with W row-major MKL gets a transposed B, with W column-major a
plain one. Measured with torch 2.13 + MKL here (`benchmarks/bench_weight_layout.py`, docs/measurements/weight-layout.md
"Weight layout"): at the 16-row tile every padded decode step runs, the model's GEMMs took 1.4-2.2x less
time, 1.1-1.5x at 32 rows, the same at 512, and every row was bitwise the same at row counts that are
multiples of 16 (at 1 row the bits differ). The eager decode step gained 0-9% (its GEMMs are a fifth of
it); the compiled step (runtime/compiled_step.py), which runs every expert, more. So the runtime lays them
column-major exactly where it pads rows (`invariance.apply_row_tile`): batch invariance and the golden
answers are unchanged (the start-up probe runs on this layout).
"""

from __future__ import annotations

import torch
from torch import nn

from ..model.transformer import MoE


def gemm_layout(model: nn.Module, column_major: bool) -> int:
    weights = []  # (parameter, whether it is the experts' fused gate/up stack)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            weights.append((module.weight, False))  # [N, K]
        elif isinstance(module, MoE):
            weights += [(module.gate_up_proj, True), (module.down_proj, False)]  # [E, 2I, D], [E, D, I]
    moved, seen = 0, set()
    for param, stacked in weights:
        if id(param) in seen or param.device.type != "cpu" or param.dtype != torch.float32:
            continue
        seen.add(id(param))  # a tied weight once
        data = param.data
        if not column_major:
            new = data.contiguous()
        elif stacked:  # one column-major [E * 2I, D], viewed back as [E, 2I, D]
            experts, rows, inner = data.shape
            new = data.reshape(experts * rows, inner).t().contiguous().t().view(experts, rows, inner)
        else:  # [..., N, K] with N unit-strided: each matrix the transpose of a contiguous [K, N]
            new = data.transpose(-2, -1).contiguous().transpose(-2, -1)
        if new.stride() != data.stride():
            param.data = new
            moved += 1
    return moved
