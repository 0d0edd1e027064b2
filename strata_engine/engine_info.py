"""What an engine says about itself (`Engine.info`, served as `/v1/engine`): its shape, the scheduler's knobs,
which path serves each kernel, MKL's reproducible mode, the KV cache's format and the process's memory."""

from __future__ import annotations

import functools
import os
from importlib import metadata
from typing import Any

from . import mkl_mode


def describe(engine: Any) -> dict[str, Any]:
    """The engine's description, as `/v1/engine` serves it (docs/API.md)."""
    sc = engine.scheduler_config
    return {
        "model": engine.model_name,
        "executor": engine.config.executor,
        "batch": sc.batch,
        "batch_groups": sc.batch_groups,
        "num_stages": sc.num_stages,
        "prefill_chunk": sc.prefill_chunk,
        "ctx": sc.ctx,
        "ctx_from": engine.ctx_choice.why,
        "piped_read_piece": sc.piped_read_piece,
        "decode_share": sc.decode_share,
        "decode_min_ms": sc.decode_min_ms,
        "decode_max_ms": sc.decode_max_ms,
        "read_mix": sc.read_mix,
        "decode_merge": sc.decode_merge,
        "layout": engine.config.layout,
        "pause_target_ms": sc.pause_target_ms,
        "device": engine.device,
        "dtype": engine.dtype,
        "vocab_size": engine.vocab_size,
        "eos_token_id": engine.eos_token_id,
        "supports_token_ids": True,
        "batch_invariant": bool(getattr(engine.executor, "batch_invariant", False)),
        "layout_invariant": bool(getattr(engine.executor, "layout_invariant", False)),
        "split": engine.config.split,
        "devices": list(engine.config.devices),
        "version": version(),
        "pid": os.getpid(),
        "stage_workers": engine.stage_workers,
        "compiled": getattr(getattr(engine.executor, "pipeline", None), "compile_info", None),
        "row_tile": getattr(getattr(engine.executor, "pipeline", None), "row_tile", None),
        "prompt_cache": engine.scheduler.prompt_cache.info(),
        "kernels": engine.kernels,
        "mkl_cbwr": None if engine.config.executor == "sim" else mkl_mode.pin(),
        "kv": {**kv_info(engine), "committed_bytes": committed_kv_bytes(engine)},
        "rss_bytes": _rss_bytes(),
    }


def kv_info(engine: Any) -> dict[str, Any]:
    """The KV cache's format and size (`/v1/engine` `kv`, and `/metrics`' strata_kv_* gauges): reserved is
    every slot at ctx; on CPU memory is committed only as positions are written and a windowed model's
    slot lets go of what its window left behind (model/kv_cache.py), so a slot holds at most
    `positions_held_per_slot` inside a forward and `positions_held_at_rest` between forwards;
    /v1/engine adds `committed_bytes` (`committed_kv_bytes`), what the OS holds of the caches now."""
    per_position = int(getattr(engine.executor, "kv_bytes_per_token", 0) or 0)
    sc = engine.scheduler_config
    held, at_rest = getattr(engine.ctx_choice, "held", None), getattr(engine.ctx_choice, "at_rest", None)
    at_rest = sc.ctx if at_rest is None else min(at_rest, sc.ctx)
    held = sc.ctx if held is None else min(held, sc.ctx)
    return {
        "dtype": engine.dtype,
        "format": engine.config.kv_dtype or {"float32": "f32", "bfloat16": "bf16"}.get(engine.dtype, engine.dtype),
        "bytes_per_position": per_position,
        "positions_per_slot": sc.ctx,
        "positions_held_per_slot": held,
        "positions_held_at_rest": at_rest,
        "reserved_bytes": per_position * sc.ctx * sc.batch,
        "held_bytes_max": per_position * held * sc.batch,
        "committed": "as written" if engine.device == "cpu" else "at start",
    }


def committed_kv_bytes(engine: Any) -> int | None:
    """What the OS holds of this process's KV caches now (model/kv_cache.committed_bytes; /v1/engine only: it
    reads a page table entry per reserved page); None for stage ranks (other processes), the simulator, off the CPU."""
    caches = getattr(getattr(engine.executor, "pipeline", None), "caches", None)
    if not caches:
        return None
    held = [cache.committed_bytes() for cache in caches]
    return None if None in held else sum(held)


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux; None elsewhere). Stage ranks are processes of their own."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))
    except (OSError, StopIteration, ValueError):
        return None


NOT_INSTALLED = "0+unknown"


@functools.cache
def version() -> str:
    """Strata's version: the installed `strata` distribution's, or NOT_INSTALLED where it is not installed (a
    source tree on sys.path). The one place the package's version is worked out."""
    try:
        return metadata.version("strata")
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED
