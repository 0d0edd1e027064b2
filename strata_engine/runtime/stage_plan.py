"""The stage plans: `--split L` / `--devices a,b,..` as the layers and the device of each pipeline stage.

Resolved once at the engine's start (resolved.py); the pipelines (pipeline.py, stage_ranks/) place and run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class StagePlan:
    index: int
    device: str
    layer_start: int
    layer_end: int  # exclusive

    @property
    def layers(self) -> range:
        return range(self.layer_start, self.layer_end)


def plan_stages(num_layers: int, split: int | None, devices: Sequence[str], default_device: str) -> list[StagePlan]:
    """--split L: layers [0, L) on stage 0, the rest on stage 1. --devices a,b,..: an even split."""
    if split is not None:
        if not 1 <= split < num_layers:
            raise ValueError(f"--split {split} must leave layers on both stages: 1 <= split < {num_layers} layers")
        devs = list(devices) if devices else [default_device, default_device]
        return [StagePlan(0, devs[0], 0, split), StagePlan(1, devs[1], split, num_layers)]
    devs = list(devices) if devices else [default_device]
    if len(devs) > num_layers:
        raise ValueError(f"{len(devs)} devices for {num_layers} layers: each stage needs at least one layer")
    base, extra = divmod(num_layers, len(devs))
    plans, start = [], 0
    for i, dev in enumerate(devs):
        size = base + (1 if i < extra else 0)
        plans.append(StagePlan(i, dev, start, start + size))
        start += size
    return plans
