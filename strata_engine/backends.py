"""Build what an Engine runs on: the torch pipeline over real weights, or the simulated executor, from the
config resolved once at start (resolved.py): its flags, STRATA_* variables and model config are read there.

Both return a `Backend` with the same fields, so the engine and the scheduler above it cannot tell
them apart except through `info()`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .resolved import Resolved


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


def build_torch(resolved: Resolved) -> Backend:
    import torch

    from .model.tokenizer import load_tokenizer
    from .model.weights import build_model
    from .runtime.native.choice import choose as choose_kernels
    from .runtime.pipeline import Pipeline
    from .runtime.built_stage import split_layers
    from .executors.torch_executor import TorchExecutor

    config, sched, runtime, stages, dtype = (
        resolved.config,
        resolved.scheduler,
        resolved.runtime,
        resolved.stages,
        resolved.dtype,
    )
    model_config, workers = resolved.model_config, resolved.stage_workers
    torch.manual_seed(config.seed)
    if runtime.compile and workers != "dist" and all(s.device.startswith("cpu") for s in stages):
        from .runtime.compiled_step import probe_vec_isa

        probe_vec_isa()  # while the model and the native ops load
    kernels = {"all": {"path": "per stage rank", "why": "each rank chooses at its start (its stderr says which)"}}
    if workers == "dist":  # each stage rank loads its own layers; the head holds no weights
        pipeline = _dist_pipeline(resolved)
    else:
        model = build_model(resolved.model_path, model_config, device="cpu", dtype=torch.float32)  # read at start
        kernels = choose_kernels(model, sched.batch, runtime.threads, decode=runtime.compile, kv_dtype=config.kv_dtype)
        split_layers(model, stages, dtype)
        pipeline = Pipeline(model, stages, sched.batch, sched.ctx, dtype, runtime, kv_dtype=config.kv_dtype)
    # The mixed read's decode rows ride eager forwards (not bitwise the compiled step's), and the C++ GEMM
    # templates round a row by its place in the micro-batch: either way no invariance claim.
    if runtime.compile and (sched.read_mix or runtime.gemms == "template"):
        pipeline.batch_invariant = pipeline.layout_invariant = False
    return Backend(
        executor=TorchExecutor(
            pipeline, kv_bytes_per_token=resolved.kv_bytes_per_token, kv_window=model_config.sliding_window
        ),
        tokenizer=load_tokenizer(resolved.model_path, model_config),
        model_name=os.path.basename(str(config.model).rstrip("/")) or str(config.model),
        device=",".join(sorted({s.device for s in stages})),
        dtype=str(dtype).replace("torch.", ""),
        vocab_size=model_config.vocab_size,
        eos_token_id=model_config.eos_token_id,
        stage_workers=workers,
        kernels=kernels,
    )


def _dist_pipeline(resolved: Resolved):
    from .runtime.invariance import default_row_tile
    from .runtime.stage_ranks.pipeline import DistPipeline
    from .runtime.stage_ranks.ranks import JoinedRanks, LocalRanks

    config, sched, runtime, stages, model_config = (
        resolved.config,
        resolved.scheduler,
        resolved.runtime,
        resolved.stages,
        resolved.model_config,
    )
    ranks = JoinedRanks(len(stages)) if config.stage_ranks == "join" else LocalRanks(len(stages))
    # The largest micro-batch: a mixed one carries a read chunk plus every slot's decode token. The ranks get the
    # runtime in their StageSpec, its row tile STRATA_ROW_TILE where it is set, else the one probed here (the head
    # loads no model, so its MKL mode is not pinned: mkl_mode.py). (STRATA_DECODE_ALL_THREADS asks for what ranks
    # always do: they decode at their own thread count.)
    if runtime.row_tile is None:
        runtime = replace(
            runtime, row_tile=default_row_tile(model_config, stages[0].device, resolved.dtype, runtime.threads)
        )
    return DistPipeline(
        ranks,
        stages,
        config.model,
        sched.batch,
        sched.ctx,
        resolved.dtype,
        model_config.hidden_size,
        model_config.vocab_size,
        runtime,
        timeout_s=config.stage_timeout_s,
        max_tokens=sched.prefill_chunk + sched.batch,
        kv_dtype=config.kv_dtype,
    )


def build_sim(resolved: Resolved, clock: Callable[[], float]) -> Backend:
    import time

    from .model.tokenizer import ByteTokenizer
    from .executors.sim import SimExecutor, load_profile

    config = resolved.config
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
        num_stages=resolved.scheduler.num_stages if (config.split or config.devices) else None,
    )
    return Backend(executor, tokenizer, f"sim:{profile.name}", "sim", "none", tokenizer.vocab_size, None)
