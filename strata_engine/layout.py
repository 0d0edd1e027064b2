"""Which layout `strata-engine serve` runs: the flags as given, or the fastest documented one for this machine.

Contract: `resolve(config, requested, given, env=None, machine=None) -> (EngineConfig, why)`.
`requested` is `--layout`: `plain` keeps the flags as they are; `fastest` lays the engine out as
docs/measurements/default-layout.md's fastest measured layout on a multi-core CPU (two stages with an even layer split, on
threads of this process, two batch groups, 256-token chunks unless `--prefill-chunk` is given, the compiled
decode step with the whole decode and its GEMMs through inductor's C++ template (`RuntimeConfig.gemms`),
the mixed read and the merged decode); `auto` (the default) means
`fastest` where it can run and the user shaped no layout of their own, else `plain`. `given` names the
EngineConfig fields the user set on the command line; naming one of `SHAPING` is choosing a layout, so
auto keeps the flags, and `fastest` beside one is a usage error. `STRATA_LAYOUT` (plain or fastest) sets
what auto means, as `STRATA_STAGE_WORKERS` does for `--stage-workers auto`. Where it is unset, auto follows this
machine's profile when `strata-engine tune` measured one (machine_profile.py: the layout that did the same work
sooner here), and the documented fastest layout otherwise. `why` is one line for the log.
`provenance(...)` says where each resolved field came from (`serve --print-config`).

The fastest layout's scheduler knobs (`read_mix`, `decode_merge`) and GEMMs are the layout's defaults: the
STRATA_* variables still override them (`EngineConfig.scheduler_config`, `EngineConfig.runtime_config`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Collection, Mapping

from . import knobs
from .config import ENV_VARS, EngineConfig, SchedulerConfig
from .runtime_config import RuntimeConfig

LAYOUTS = ("auto", "plain", "fastest")
LAYOUT_ENV = "STRATA_LAYOUT"  # what --layout auto picks: plain or fastest
SHAPING = ("split", "devices", "batch_groups", "stage_workers", "compile", "executor", "device")
FASTEST_CHUNK = 256  # docs/measurements/decode-step.md: 128 / 256 / 512 in the spec layout with the mixed read, 256 won


@dataclass(frozen=True)
class Machine:
    cores: int  # CPUs this process may run on
    cuda: bool
    layers: int  # the model's decoder layers
    profile: dict[str, Any] | None = None  # machine_profile.read: what `strata-engine tune` measured here


def flags(names) -> str:
    """EngineConfig field names as the command line spells them: --split, --batch-groups, ..."""
    return ", ".join("--" + name.replace("_", "-") for name in names)


def this_machine(config: EngineConfig) -> Machine:
    """The cores (counted as the thread default and --stage-workers auto count them), whether CUDA is there, the
    model's layer count and this machine's profile for the model (imports torch: the engine is next)."""
    import torch

    from . import machine_profile
    from .model.model_dir import read_config, resolve_model_path

    return Machine(
        os.cpu_count() or 1,
        torch.cuda.is_available(),
        read_config(resolve_model_path(config.model)).num_layers,
        machine_profile.read(config.model, config.env),
    )


def _unfit(config: EngineConfig, machine: Machine) -> str | None:
    """Why the fastest layout cannot run here, or None."""
    if config.executor != "torch":
        return f"the {config.executor} executor"
    if config.device not in (None, "cpu") or (config.device is None and machine.cuda):
        return "a GPU (the fastest layout is measured on CPU only)"
    if config.kv_dtype not in (None, "f32"):
        return f"--kv-dtype {config.kv_dtype} (the compiled step reads float32 caches)"
    if machine.cores < 2:
        return "one CPU core (two stages would share it)"
    if machine.layers < 2:
        return f"a model of {machine.layers} layer (two stages need two)"
    if config.batch < 2:
        return "--batch 1 (two batch groups need two slots)"
    return None


def fastest(config: EngineConfig, given: Collection[str]) -> EngineConfig:
    chunk = config.prefill_chunk if "prefill_chunk" in given else FASTEST_CHUNK
    # Thread stages, not ranks: only they share the KV cache that lets a decode step run every layer in one
    # compiled call (the whole decode, runtime/pipeline.py), which beat the ranks' three hops a step in
    # docs/measurements/default-layout.md, "On stage threads, with the whole decode"; the reads came out level.
    return replace(
        config,
        layout="fastest",
        devices=("cpu", "cpu"),
        split=None,
        batch_groups=2,
        compile=True,
        prefill_chunk=chunk,
        stage_workers="thread",
    )


def resolve(
    config: EngineConfig,
    requested: str,
    given: Collection[str],
    env: Mapping[str, str] | None = None,
    machine: Callable[[EngineConfig], Machine] | Machine | None = None,
) -> tuple[EngineConfig, str]:
    if requested not in LAYOUTS:
        raise ValueError(f"--layout must be one of {', '.join(LAYOUTS)}, got {requested!r}")
    if requested == "plain":
        return config, "plain: the flags as given (--layout plain)"
    shaped = [name for name in SHAPING if name in given]
    if requested == "auto":
        meant = knobs.read(LAYOUT_ENV, env)
        if meant == "plain":
            return config, f"plain: {LAYOUT_ENV}=plain"
        if shaped:
            return config, f"plain: the layout flags given ({flags(shaped)})"
    elif shaped:
        raise ValueError(
            f"--layout fastest sets the stages, groups and compiled step itself; drop {flags(shaped)}, "
            "or use --layout plain"
        )
    found = machine if isinstance(machine, Machine) else (machine or this_machine)(config)
    unfit = _unfit(config, found)
    if unfit is not None:
        if requested == "fastest":
            raise ValueError(f"--layout fastest cannot run with {unfit}; use --layout plain")
        return config, f"plain: auto found {unfit}"
    how = "--layout fastest" if requested == "fastest" else f"auto on {found.cores} CPU cores"
    if requested == "auto" and not knobs.is_set(LAYOUT_ENV, env):
        if found.profile is not None:
            from .machine_profile import why as measured

            if found.profile["layout"] == "plain":
                return config, f"plain: auto follows {measured(found.profile)}"
            how = f"auto follows {measured(found.profile)}"
        else:
            how += "; no machine profile: `strata-engine tune` measures one"
    laid_out = fastest(config, given)
    return laid_out, (
        f"fastest ({how}): 2 stage threads, 2 batch groups, {laid_out.prefill_chunk}-token chunks, compiled "
        "and whole decode, its GEMMs through C++ templates (compiled before the ready line: ~40-60 s, ~10-20 s "
        "warm from inductor's cache), mixed read, "
        "merged decode "
        "(--layout plain: the flags alone)"
    )


def provenance(flagged: EngineConfig, laid_out: EngineConfig, given: Collection[str]) -> list[tuple[str, Any, str]]:
    """(field, value, source) for each EngineConfig, RuntimeConfig and SchedulerConfig field of `laid_out` (`flagged`
    before `resolve`, `given` the flags given, --layout as "layout"): a flag, `layout`, a STRATA_* variable,
    `EngineConfig` (a field the group takes from it) or `default`."""
    rows, env = [], laid_out.env
    for f in [f for f in fields(EngineConfig) if f.name != "env"]:
        value = getattr(laid_out, f.name)
        auto = {"layout": LAYOUT_ENV, "stage_workers": "STRATA_STAGE_WORKERS"}.get(f.name)  # what auto means
        if f.name in given:
            source = "--" + f.name.replace("_", "-")
        elif auto and knobs.is_set(auto, env) and (f.name == "layout" or value == "auto"):
            source = f"{auto}={knobs.read(auto, env)} (what auto means)"
        elif f.name == "layout":
            source = "default (--layout auto)"
        else:
            source = "layout" if value != getattr(flagged, f.name) else "default"
        rows.append((f"EngineConfig.{f.name}", value, source))
    rows += _runtime_rows(laid_out)
    variables = {field: name for name, field in ENV_VARS.items()}
    sched = laid_out.scheduler_config()
    for f in fields(SchedulerConfig):
        value, name = getattr(sched, f.name), variables.get(f.name)
        if name:
            source = name if knobs.is_set(name, env) else "layout" if value != knobs.KNOBS[name].default else "default"
        elif f.name == "ctx" and laid_out.ctx is None:
            value, source = None, "derived from the model and the memory at engine start"
        else:
            source = "default" if f.name == "prompt_cache_min_tokens" else "EngineConfig"
        rows.append((f"SchedulerConfig.{f.name}", value, source))
    return rows


def _runtime_rows(laid_out: EngineConfig) -> list[tuple[str, Any, str]]:
    """The RuntimeConfig group: --threads and --compile from EngineConfig, the rest a STRATA_* variable where it
    is set, else the layout's value where it differs from the plain default, else the default."""
    runtime, plain, env = laid_out.runtime_config(), RuntimeConfig.from_env({}), laid_out.env
    variables = {
        k.sets.split(".", 1)[1]: name for name, k in knobs.KNOBS.items() if k.sets.startswith("RuntimeConfig.")
    }
    rows = []
    for f in fields(RuntimeConfig):
        value, name = getattr(runtime, f.name), variables.get(f.name)
        if f.name == "threads" and value is None:
            source = "derived from the cores and the stages at engine start"
        elif name is None:
            source = "EngineConfig"
        elif knobs.is_set(name, env):
            source = name
        else:
            source = "layout" if value != getattr(plain, f.name) else "default"
        rows.append((f"RuntimeConfig.{f.name}", value, source))
    return rows
