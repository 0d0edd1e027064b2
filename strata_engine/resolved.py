"""An `EngineConfig` resolved once, at the engine's start, into the pieces each builder takes.

`resolve` reads the STRATA_* variables once (knobs.py), the model's config once and the machine's memory, and
returns a `Resolved`: the slot context (context_length.py) and the config that carries it, the scheduler's and
the torch runtime's configs, the stage plans and what runs them, the model's folder, config, dtype and KV bytes
a token. backends.py builds the executor from it; nothing after it reads the flags' defaults or the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import knobs
from .config import EngineConfig, SchedulerConfig, engine_knobs
from .context_length import SIM_DEFAULT_CTX, ContextChoice, choose_ctx, kv_bytes_per_token, memory_bytes
from .runtime_config import RuntimeConfig


@dataclass(frozen=True)
class Resolved:
    config: EngineConfig  # as given, its ctx resolved
    ctx_choice: ContextChoice
    scheduler: SchedulerConfig
    runtime: RuntimeConfig  # torch: its threads resolved where every stage is on the CPU
    stage_workers: str = "none"  # torch: "thread" or "dist"; sim: "none"
    stages: tuple = ()  # torch: the stage plans (runtime/stage_plan.StagePlan)
    device: str = "sim"  # torch: the default device (--device, else cuda where present, else cpu)
    dtype: Any = None  # torch: the weights' torch dtype
    model_path: Path | None = None  # torch: the model's folder
    model_config: Any = None  # torch: its ModelConfig
    kv_bytes_per_token: int = 0  # torch: a slot's KV bytes per position (context_length.kv_bytes_per_token)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_dtype(name: str | None, device: str):
    """--dtype as a torch dtype; None = float32 on the CPU, bfloat16 elsewhere."""
    import torch

    if name is None:
        return torch.float32 if device.startswith("cpu") else torch.bfloat16
    table = {
        "fp32": torch.float32,
        "float32": torch.float32,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
    }
    if name not in table:
        raise ValueError(f"dtype must be one of {sorted(table)}, got {name!r}")
    return table[name]


def resolve(config: EngineConfig) -> Resolved:
    """`config` on this machine: the STRATA_* variables read once; for torch, the model's config, the slot context
    (--ctx checked against the model, or derived from the model and the memory) and the stage plans."""
    torch_engine = config.executor == "torch"
    device = (config.device or _default_device()) if torch_engine else "sim"
    dtype = torch_dtype(config.dtype, device) if torch_engine else None
    found = knobs.read_set(engine_knobs(config), config.env)
    scheduler = config.scheduler_config(found)
    stage_devices = config.devices or (device,)  # what every stage plan runs on
    workers = config.stage_workers_for(stage_devices, found) if torch_engine else "none"
    runtime = config.runtime_config(found)
    model_path = model_config = None
    per_token, stages = 0, ()
    if not torch_engine:
        choice = ContextChoice(config.ctx or SIM_DEFAULT_CTX, "--ctx" if config.ctx else "the simulator's default")
    else:
        import torch

        from .model.kv_cache import positions_at_rest, positions_held
        from .model.model_dir import read_config, resolve_model_path
        from .runtime.stage_plan import plan_stages

        model_path = resolve_model_path(config.model)
        model_config = read_config(model_path)
        per_token = kv_bytes_per_token(
            model_config.num_layers,
            model_config.num_kv_heads,
            model_config.head_dim,
            torch.tensor([], dtype=dtype).element_size(),
            config.kv_dtype,
        )
        lazy = all(d.startswith("cpu") for d in stage_devices)  # the CPU cache commits as it writes
        window = model_config.sliding_window
        choice = choose_ctx(
            config.ctx,
            model_config.max_position_embeddings,
            config.batch,
            per_token,
            memory_bytes(device),
            config.allow_ctx_beyond_model,
            held=positions_held(window, config.prefill_chunk) if lazy else None,
        )
        choice = replace(choice, at_rest=positions_at_rest(window) if lazy else None)
        stages = tuple(plan_stages(model_config.num_layers, config.split, config.devices, device))
        if runtime.threads is None and all(s.device.startswith("cpu") for s in stages):
            # One core stays with the front end (HTTP, scheduler, sampler, detokenizer share this process's GIL):
            # on 2 cores, 2 OpenMP threads beside it spin against it (docs/measurements/decode-step.md).
            runtime = replace(runtime, threads=max(1, ((os.cpu_count() or 1) - 1) // len(stages)))
    config, scheduler = replace(config, ctx=choice.ctx), replace(scheduler, ctx=choice.ctx)
    return Resolved(
        config, choice, scheduler, runtime, workers, stages, device, dtype, model_path, model_config, per_token
    )
