"""A built pipeline stage: its layers placed, its KV cache and compiled step, alike for the thread stages
(pipeline.py) and a stage rank (stage_ranks/).

Contract: `place_stage` casts a stage's layers to its device and dtype, embed too on the first stage, the final
norm and head on the last; `split_layers` does so for every stage of one model the threads share, and a rank,
which holds one stage, first `drop_other_stages` (other layers Identity, embed / norm / head None).
`BuiltStage.build` then makes the stage's KV cache (its layers only) and, with `runtime.compile`, its compiled
decode step, warmed up here: call it after `apply_row_tile`, as the step is compiled over the laid-out weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..model.kv_cache import KVCache
from ..runtime_config import RuntimeConfig
from .compiled_step import CompiledDecode, compiled_stage
from .stage_plan import StagePlan


def place_stage(model: torch.nn.Module, plan: StagePlan, dtype: torch.dtype, is_first: bool, is_last: bool) -> None:
    """Embed (first stage), the plan's layers, final norm and head (last stage) onto the plan's device."""
    if is_first:
        model.embed_tokens.to(device=plan.device, dtype=dtype)
    for i in plan.layers:
        model.layers[i].to(device=plan.device, dtype=dtype)
    if is_last:
        model.norm.to(device=plan.device, dtype=dtype)
        model.lm_head.to(device=plan.device, dtype=dtype)  # may share its weight with embed_tokens (tied)


def split_layers(model: torch.nn.Module, stages: Sequence[StagePlan], dtype: torch.dtype) -> None:
    """Every stage placed on one model (the thread stages share it): nothing dropped."""
    for i, plan in enumerate(stages):
        place_stage(model, plan, dtype, i == 0, i == len(stages) - 1)


def drop_other_stages(model: torch.nn.Module, plan: StagePlan, is_first: bool, is_last: bool) -> None:
    """Free what another stage holds: its layers become Identity, embed (not first) and norm and head (not
    last) None."""
    for i in range(len(model.layers)):
        if i not in plan.layers:
            model.layers[i] = torch.nn.Identity()
    if not is_first:
        model.embed_tokens = None
    if not is_last:
        model.norm = model.lm_head = None


@dataclass(frozen=True)
class BuiltStage:
    """What a stage builds beside its placed layers."""

    cache: KVCache  # the stage's layers' keys and values
    compiled: CompiledDecode | None  # the compiled decode step; None without runtime.compile

    @classmethod
    def build(
        cls,
        model: torch.nn.Module,
        plan: StagePlan,
        is_first: bool,
        is_last: bool,
        num_slots: int,
        ctx: int,
        dtype: torch.dtype,
        runtime: RuntimeConfig,
        kv_dtype: str | None = None,
    ) -> BuiltStage:
        cache = KVCache(model.config, num_slots, ctx, dtype, plan.device, layers=plan.layers, kv_dtype=kv_dtype)
        compiled = None
        if runtime.compile:
            compiled = compiled_stage(model, plan, cache, is_first, is_last, num_slots, runtime)
        return cls(cache, compiled)
