"""Engine and scheduler configuration: frozen dataclasses, validated in __post_init__.

Three groups: `SchedulerConfig` (the pure-Python scheduler's), `RuntimeConfig` (the torch runtime's,
runtime_config.py) and `EngineConfig` (every `serve` flag), which resolves the other two.
The STRATA_* variables are listed and parsed in knobs.py; the scheduler's are applied here (`SchedulerConfig.with_env`).
Unset or empty keeps the default, a bad value raises naming the variable; zero piece size means the one-run read ("release").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from . import knobs
from .kernel_switches import KERNEL_ENVS, kernel_mode
from .runtime_config import RUNTIME_KNOBS, RuntimeConfig

# Variable name -> the SchedulerConfig field it sets (knobs.KNOBS has the rest: parser, default, help)
ENV_VARS: dict[str, str] = {
    name: knob.sets.split(".", 1)[1] for name, knob in knobs.KNOBS.items() if knob.sets.startswith("SchedulerConfig.")
}

STAGE_WORKERS = ("auto", "thread", "dist")
# The host store's default cap: 1 GiB holds 64 agents' 4,000-token contexts of the embedded model (4 KiB of
# KV a token) or ~10,000 tokens of a 30B-class MoE in bf16, and is a small share of any machine that runs a model.
DEFAULT_PROMPT_CACHE_MIB = 1024
PROMPT_CACHE_MIN_TOKENS = 32  # a shorter match does not pay for pushing a slot's prefix out
STAGE_WORKERS_ENV = "STRATA_STAGE_WORKERS"  # sets what --stage-workers auto picks
STAGE_RANKS = ("launch", "join")
KV_DTYPES = ("f32", "bf16", "q8", "k8v4")  # model/kv_format.NAMES (no torch here)


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the pure-Python scheduler (no torch; the torch runtime's are RuntimeConfig's)."""

    batch: int = 4
    batch_groups: int = 1  # resolved (auto already replaced by the stage count)
    num_stages: int = 1
    prefill_chunk: int = 512
    ctx: int = 4096
    piped_read_piece: int = 0
    decode_share: float = 0.5
    decode_min_ms: float = 20.0
    decode_max_ms: float = 400.0
    read_mix: int = 0
    pause_target_ms: float = 0.0
    decode_merge: int = 0
    prompt_cache_mib: int = 0  # 0 = no slot reuse and no host store (the engine's default is on: EngineConfig)
    prompt_cache_min_tokens: int = PROMPT_CACHE_MIN_TOKENS

    def __post_init__(self) -> None:
        if self.prompt_cache_mib < 0 or self.prompt_cache_min_tokens < 1:
            raise ValueError(
                f"prompt_cache_mib must be >= 0 and prompt_cache_min_tokens >= 1, got "
                f"{self.prompt_cache_mib} and {self.prompt_cache_min_tokens}"
            )
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not 1 <= self.batch_groups <= self.batch:
            raise ValueError(f"batch_groups must be in [1, batch={self.batch}], got {self.batch_groups}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {self.prefill_chunk}")
        if self.ctx < 2:
            raise ValueError(f"ctx must be >= 2, got {self.ctx}")
        if self.decode_max_ms < self.decode_min_ms:
            raise ValueError(
                f"STRATA_PIPED_DECODE_MAX_MS ({self.decode_max_ms}) is below STRATA_PIPED_DECODE_MIN_MS ({self.decode_min_ms})"
            )

    @property
    def pipelined(self) -> bool:
        return self.batch_groups > 1

    def group_slots(self) -> list[list[int]]:
        """Slots split into batch_groups contiguous groups: --batch 4 --batch-groups 2 -> [[0,1],[2,3]]."""
        base, extra = divmod(self.batch, self.batch_groups)
        sizes = [base + (1 if g < extra else 0) for g in range(self.batch_groups)]
        return [list(range(sum(sizes[:g]), sum(sizes[: g + 1]))) for g in range(self.batch_groups)]

    def with_env(self, env: Mapping[str, str] | None = None) -> "SchedulerConfig":
        """The STRATA_* variables over this config: an unset one keeps this config's value, which is the
        variable's default unless a layout set it (layout.py); a bad one (or MAX below MIN) raises naming it."""
        return self.with_knobs(knobs.read_set(ENV_VARS, env))

    def with_knobs(self, found: Mapping[str, Any]) -> "SchedulerConfig":
        """`with_env` over knobs already read (knobs.read_set): an absent one keeps this config's value."""
        return replace(self, **{fld: found[name] for name, fld in ENV_VARS.items() if name in found})


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
        """The scheduler's knobs: the flags, the layout's, and the STRATA_* variables where set (`found`: knobs_read)."""
        base = SchedulerConfig(
            batch=self.batch,
            batch_groups=self.resolved_batch_groups(),
            num_stages=self.num_stages,
            prefill_chunk=self.prefill_chunk,
            ctx=self.ctx if self.ctx is not None else SchedulerConfig.ctx,
            prompt_cache_mib=self.prompt_cache_mib,
        )
        if self.layout == "fastest":  # the layout's knobs; the STRATA_* variables still override them
            base = replace(base, read_mix=1, decode_merge=1)
        return base.with_knobs(self.knobs_read() if found is None else found)


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
