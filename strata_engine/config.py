"""The engine's configuration: `EngineConfig`, every `serve` flag, a frozen dataclass validated in __post_init__.

It resolves the other two groups, `SchedulerConfig` (the pure-Python scheduler's, scheduler_config.py) and
`RuntimeConfig` (the torch runtime's, runtime_config.py), over the layout's defaults and the STRATA_* variables
(listed and parsed in knobs.py, read once: `knobs_read`). Unset or empty keeps the default, a bad value raises
naming the variable. An engine resolves it once, on its machine, in resolved.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import knobs
from .kernel_switches import KERNEL_ENVS, kernel_mode
from .runtime_config import RUNTIME_KNOBS, RuntimeConfig
from .scheduler_config import ENV_VARS, SchedulerConfig

STAGE_WORKERS = ("auto", "thread", "dist")
# The host store's default cap: 1 GiB holds 64 agents' 4,000-token contexts of the embedded model (4 KiB of
# KV a token) or ~10,000 tokens of a 30B-class MoE in bf16, and is a small share of any machine that runs a model.
DEFAULT_PROMPT_CACHE_MIB = 1024
STAGE_WORKERS_ENV = "STRATA_STAGE_WORKERS"  # sets what --stage-workers auto picks
STAGE_RANKS = ("launch", "join")
KV_DTYPES = ("f32", "bf16", "q8", "k8v4")  # model/kv_format.NAMES (no torch here)


@dataclass(frozen=True)
class EngineConfig:
    """Everything `strata-engine serve` and `Engine.from_pretrained` accept."""

    model: str = "strata-tiny-moe"
    batch: int = 4
    batch_groups: str | int = 1  # int or "auto" (= one per stage)
    split: int | None = None  # layers [0, split) on stage 0, the rest on stage 1
    devices: tuple[str, ...] = ()  # e.g. ("cuda:0", "cuda:1") or ("cpu", "cpu"): even split
    prefill_chunk: int = 512
    ctx: int | None = None  # None = derived from the model and the memory (context_length.py)
    allow_ctx_beyond_model: bool = False  # let --ctx exceed the model's max_position_embeddings
    executor: str = "torch"  # "torch" or "sim"
    device: str | None = None  # None = cuda when present, else cpu
    dtype: str | None = None  # None = fp32 on cpu, bf16 on cuda
    kv_dtype: str | None = None  # the KV cache's format: f32, bf16, q8, k8v4 (model/kv_format.py); None = the dtype's
    seed: int = 0
    sim_profile: str | None = None  # name or path of a sim cost profile (sim executor)
    time_scale: float = 1.0  # sim: modelled seconds per wall second
    threads: int | None = None  # torch intra-op threads per stage worker
    stage_workers: str = "auto"  # "thread", "dist" (one torch.distributed rank per stage) or "auto" (stage_workers_for)
    stage_ranks: str = "launch"  # dist: "launch" = start the stage ranks here; "join" = they join through env://
    stage_timeout_s: float = 60.0  # dist: the longest a micro-batch may take before its rank is declared hung
    compile: bool = False  # torch: decode-only micro-batches through the compiled step (runtime/compiled_step.py)
    log_events: bool = False  # echo events to stderr (the server's --log-events); else to logging at DEBUG
    prompt_cache_mib: int = DEFAULT_PROMPT_CACHE_MIB  # host store cap; 0 = no prompt cache at all (slots nor store)
    layout: str = "plain"  # "plain" or "fastest" (layout.py, which also sets the fields that layout needs)
    env: Mapping[str, str] | None = field(default=None, compare=False, repr=False)  # None = the process environment

    def __post_init__(self) -> None:
        if isinstance(self.devices, str):
            object.__setattr__(self, "devices", tuple(d for d in self.devices.split(",") if d))
        if self.executor not in ("torch", "sim"):
            raise ValueError(f"executor must be 'torch' or 'sim', got {self.executor!r}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {self.prefill_chunk}")
        if self.ctx is not None and self.ctx < 2:
            raise ValueError(f"ctx must be >= 2, got {self.ctx}")
        if self.split is not None and self.split < 1:
            raise ValueError(f"split must be >= 1 (layers on stage 0), got {self.split}")
        if self.split is not None and self.devices and len(self.devices) != 2:
            raise ValueError("--split L places layers on two stages; give --devices with exactly two entries or none")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.stage_workers not in STAGE_WORKERS:
            raise ValueError(f"stage_workers must be one of {', '.join(STAGE_WORKERS)}, got {self.stage_workers!r}")
        if self.stage_ranks not in STAGE_RANKS:
            raise ValueError(f"stage_ranks must be one of {', '.join(STAGE_RANKS)}, got {self.stage_ranks!r}")
        if self.stage_timeout_s <= 0:
            raise ValueError(f"stage_timeout_s must be > 0, got {self.stage_timeout_s}")
        if self.compile and self.executor != "torch":
            raise ValueError("--compile compiles the torch executor's model step; the sim executor has none")
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r}")
        if self.compile and self.kv_dtype not in (None, "f32"):
            raise ValueError(
                f"--kv-dtype {self.kv_dtype}: the compiled step (--compile, the fastest layout) reads float32 "
                "caches; drop --compile and use --layout plain"
            )
        for name in KERNEL_ENVS if self.executor == "torch" else ():
            kernel_mode(name, self.env)  # so is a bad kernel switch
        if self.stage_ranks == "join" and self.stage_workers != "dist":
            raise ValueError("--stage-ranks join needs --stage-workers dist")
        if not isinstance(self.prompt_cache_mib, int) or self.prompt_cache_mib < 0:
            raise ValueError(f"prompt_cache_mib must be an integer >= 0 (0 = off), got {self.prompt_cache_mib!r}")
        if self.executor == "torch" and self.prompt_cache_mib:
            available = host_memory_available()
            if self.prompt_cache_mib * 2**20 > available:
                raise ValueError(
                    f"--prompt-cache {self.prompt_cache_mib} MiB cannot be held: this machine has "
                    f"{available // 2**20} MiB of memory available now; give at most that, or 0 to turn it off"
                )
        if self.layout not in ("plain", "fastest"):
            raise ValueError(
                f"layout must be 'plain' or 'fastest' (auto is resolved by layout.resolve), got {self.layout!r}"
            )
        if isinstance(self.batch_groups, str) and self.batch_groups != "auto":
            try:
                object.__setattr__(self, "batch_groups", int(self.batch_groups))
            except ValueError:
                raise ValueError(f"batch_groups must be an integer or 'auto', got {self.batch_groups!r}") from None
        self.scheduler_config(knobs.read_set(ENV_VARS, self.env))  # a bad STRATA_* scheduler variable too
        self.runtime_config(knobs.read_set(RUNTIME_KNOBS, self.env))  # and a bad runtime one, or --threads

    @property
    def num_stages(self) -> int:
        if self.devices:
            return len(self.devices)
        return 2 if self.split is not None else 1

    def knobs_read(self) -> dict[str, Any]:
        """The STRATA_* variables this config resolves over (the scheduler's, the runtime's, what auto stage workers
        means), read from its env at once (knobs.read_set): `scheduler_config`, `runtime_config` and
        `stage_workers_for` take them."""
        return knobs.read_set(engine_knobs(self), self.env)

    def stage_workers_for(self, stage_devices: Sequence[str] = ("cpu",), found: Mapping[str, Any] | None = None) -> str:
        """What runs each pipeline stage: a thread of this process or a torch.distributed rank of its own.

        auto, by the rule measured with benchmarks/bench_pipeline.py (docs/DISTRIBUTED.md, "Which workers
        auto picks"): ranks where stages can overlap, that is 2 or more stages and 2 or more batch groups,
        every stage on the CPU and a core for each (there, in three runs, 2 groups of 4 decoded at 1.35-1.85x
        one group on ranks and 1.14-1.40x on threads, whose stages share the GIL); threads otherwise (one
        group overlaps nothing, and a thread pipeline starts ~3 s sooner). CUDA stays on threads: stage ranks
        talk over gloo through host memory (docs/DISTRIBUTED.md), and there is no NCCL path."""
        if self.stage_workers != "auto":
            return self.stage_workers
        chosen = (self.knobs_read() if found is None else found).get(STAGE_WORKERS_ENV)
        if chosen:  # what auto means here (the test suite keeps its many small engines on threads)
            return chosen
        overlap = self.num_stages >= 2 and self.resolved_batch_groups() >= 2
        cpu_only = all(str(device).startswith("cpu") for device in stage_devices)
        return "dist" if overlap and cpu_only and (os.cpu_count() or 1) >= self.num_stages else "thread"

    def resolved_batch_groups(self) -> int:
        groups = self.num_stages if self.batch_groups == "auto" else int(self.batch_groups)
        return max(1, min(groups, self.batch))

    def runtime_config(self, found: Mapping[str, Any] | None = None) -> RuntimeConfig:
        """The torch runtime's knobs: --threads and --compile as given, STRATA_ROW_TILE, STRATA_DECODE_ALL_THREADS and
        STRATA_COMPILED_GEMMS where set (`found`: knobs_read), else the layout's GEMMs (fastest: inductor's C++
        template; else MKL's)."""
        found = self.knobs_read() if found is None else found
        return RuntimeConfig.from_knobs(found, threads=self.threads, compile=self.compile, layout=self.layout)

    def scheduler_config(self, found: Mapping[str, Any] | None = None) -> SchedulerConfig:
        """The scheduler's knobs: the flags, the layout's (fastest: the mixed read and the decode merge), and the
        STRATA_* variables where set (`found`: knobs_read), which override the layout's."""
        found = self.knobs_read() if found is None else found
        laid_out = {"read_mix": 1, "decode_merge": 1} if self.layout == "fastest" else {}
        return SchedulerConfig(
            batch=self.batch,
            batch_groups=self.resolved_batch_groups(),
            num_stages=self.num_stages,
            prefill_chunk=self.prefill_chunk,
            ctx=self.ctx if self.ctx is not None else SchedulerConfig.ctx,
            prompt_cache_mib=self.prompt_cache_mib,
            **{**laid_out, **{fld: found[name] for name, fld in ENV_VARS.items() if name in found}},
        )


def engine_knobs(config: EngineConfig) -> tuple[str, ...]:
    """The STRATA_* variables `config` resolves over, in the order they are read: the scheduler's, the runtime's,
    and STRATA_STAGE_WORKERS where a torch engine's --stage-workers is auto (nowhere else is it read)."""
    auto = config.executor == "torch" and config.stage_workers == "auto"
    return (*ENV_VARS, *RUNTIME_KNOBS, *((STAGE_WORKERS_ENV,) if auto else ()))


def host_memory_available() -> int:
    """Bytes of host memory available now (MemAvailable; the free pages where /proc is missing)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
