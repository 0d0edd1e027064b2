"""Build what an Engine runs on: the torch pipeline over real weights, or the simulated executor.

Both return a `Backend` with the same fields, so the engine and the scheduler above it cannot tell
them apart except through `info()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .config import EngineConfig, SchedulerConfig
from .runtime_config import RuntimeConfig
from .context_length import SIM_DEFAULT_CTX, ContextChoice, choose_ctx, kv_bytes_per_token, memory_bytes


@dataclass(frozen=True)
class Backend:
    executor: Any
    tokenizer: Any
    model_name: str
    device: str
    dtype: str
    vocab_size: int
    eos_token_id: int | None
    stage_workers: str = "none"  # torch: "thread" or "dist" (resolved); sim: "none"
    kernels: dict = field(
        default_factory=dict
    )  # per native op: the path that serves and why (runtime/native/choice.py)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _dtype(name: str | None, device: str):
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


def resolve_ctx(config: EngineConfig) -> ContextChoice:
    """The slot context: --ctx checked against the model, or derived from the model and the memory."""
    if config.executor == "sim":
        return ContextChoice(config.ctx or SIM_DEFAULT_CTX, "--ctx" if config.ctx else "the simulator's default")
    import torch

    from .model.weights import read_config, resolve_model_path

    from .model.kv_cache import positions_at_rest, positions_held

    model_config = read_config(resolve_model_path(config.model))
    device = config.device or _default_device()
    per_token = kv_bytes_per_token(
        model_config.num_layers,
        model_config.num_kv_heads,
        model_config.head_dim,
        torch.tensor([], dtype=_dtype(config.dtype, device)).element_size(),
        config.kv_dtype,
    )
    lazy = all(d.startswith("cpu") for d in (config.devices or (device,)))  # the CPU cache commits as it writes
    choice = choose_ctx(
        config.ctx,
        model_config.max_position_embeddings,
        config.batch,
        per_token,
        memory_bytes(device),
        config.allow_ctx_beyond_model,
        held=positions_held(model_config.sliding_window, config.prefill_chunk) if lazy else None,
    )
    return replace(choice, at_rest=positions_at_rest(model_config.sliding_window) if lazy else None)


def build_torch(config: EngineConfig, sched: SchedulerConfig) -> Backend:
    import torch

    from .model.tokenizer import load_tokenizer
    from .model.weights import load_model, read_config, resolve_model_path
    from .runtime.native.choice import choose as choose_kernels
    from .runtime.pipeline import Pipeline, plan_stages, split_layers
    from .executors.torch_executor import TorchExecutor

    device = config.device or _default_device()
    dtype = _dtype(config.dtype, device)
    torch.manual_seed(config.seed)
    model_config = read_config(resolve_model_path(config.model))
    stages = plan_stages(model_config.num_layers, config.split, config.devices, device)
    runtime = config.runtime_config()
    if runtime.threads is None and all(s.device.startswith("cpu") for s in stages):
        # One core stays with the front end (HTTP, scheduler, sampler, detokenizer share this process's GIL):
        # on 2 cores, 2 OpenMP threads beside it spin against it (docs/measurements/decode-step.md).
        runtime = replace(runtime, threads=max(1, ((os.cpu_count() or 1) - 1) // len(stages)))
    workers = config.stage_workers_for([s.device for s in stages])
    if runtime.compile and workers != "dist" and all(s.device.startswith("cpu") for s in stages):
        from .runtime.compiled_step import probe_vec_isa

        probe_vec_isa()  # while the model and the native ops load
    kernels = {"all": {"path": "per stage rank", "why": "each rank chooses at its start (its stderr says which)"}}
    if workers == "dist":  # each stage rank loads its own layers; the head holds no weights
        pipeline = _dist_pipeline(config, sched, runtime, stages, dtype, model_config)
    else:
        model, model_config = load_model(config.model, device="cpu", dtype=torch.float32)
        model.eval()
        kernels = choose_kernels(model, sched.batch, runtime.threads, decode=runtime.compile, kv_dtype=config.kv_dtype)
        split_layers(model, stages, dtype)
        pipeline = Pipeline(model, stages, sched.batch, sched.ctx, dtype, runtime, kv_dtype=config.kv_dtype)
    # The mixed read's decode rows ride eager forwards (not bitwise the compiled step's), and the C++ GEMM
    # templates round a row by its place in the micro-batch: either way no invariance claim.
    if runtime.compile and (sched.read_mix or runtime.gemms == "template"):
        pipeline.batch_invariant = pipeline.layout_invariant = False
    tokenizer = load_tokenizer(resolve_model_path(config.model), model_config)
    per_token = kv_bytes_per_token(
        model_config.num_layers,
        model_config.num_kv_heads,
        model_config.head_dim,
        torch.tensor([], dtype=dtype).element_size(),
        config.kv_dtype,
    )
    return Backend(
        executor=TorchExecutor(pipeline, kv_bytes_per_token=per_token, kv_window=model_config.sliding_window),
        tokenizer=tokenizer,
        model_name=os.path.basename(str(config.model).rstrip("/")) or str(config.model),
        device=",".join(sorted({s.device for s in stages})),
        dtype=str(dtype).replace("torch.", ""),
        vocab_size=model_config.vocab_size,
        eos_token_id=model_config.eos_token_id,
        stage_workers=workers,
        kernels=kernels,
    )


def _dist_pipeline(config: EngineConfig, sched: SchedulerConfig, runtime: RuntimeConfig, stages, dtype, model_config):
    from .runtime.invariance import default_row_tile
    from .runtime.stage_ranks.pipeline import DistPipeline
    from .runtime.stage_ranks.ranks import JoinedRanks, LocalRanks

    ranks = JoinedRanks(len(stages)) if config.stage_ranks == "join" else LocalRanks(len(stages))
    # The largest micro-batch: a mixed one carries a read chunk plus every slot's decode token. The ranks get the
    # runtime in their StageSpec, its row tile STRATA_ROW_TILE where it is set, else the probed one.
    # (STRATA_DECODE_ALL_THREADS asks for what ranks always do: they decode at their own thread count.)
    if runtime.row_tile is None:
        runtime = replace(runtime, row_tile=default_row_tile(model_config, stages[0].device, dtype, runtime.threads))
    return DistPipeline(
        ranks,
        stages,
        config.model,
        sched.batch,
        sched.ctx,
        dtype,
        model_config.hidden_size,
        model_config.vocab_size,
        runtime,
        timeout_s=config.stage_timeout_s,
        max_tokens=sched.prefill_chunk + sched.batch,
        kv_dtype=config.kv_dtype,
    )


def build_sim(config: EngineConfig, sched: SchedulerConfig, clock: Callable[[], float]) -> Backend:
    import time

    from .model.tokenizer import ByteTokenizer
    from .executors.sim import SimExecutor, load_profile

    profile = load_profile(config.sim_profile or "pr2050-2x5090")
    tokenizer = ByteTokenizer()
    executor = SimExecutor(
        profile,
        clock=clock,
        sleep=time.sleep,
        time_scale=config.time_scale,
        vocab_size=tokenizer.vocab_size,
        eos_token_id=None,
        seed=config.seed,
        num_stages=sched.num_stages if (config.split or config.devices) else None,
    )
    return Backend(executor, tokenizer, f"sim:{profile.name}", "sim", "none", tokenizer.vocab_size, None)
