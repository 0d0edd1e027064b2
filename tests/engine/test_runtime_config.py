"""The torch runtime's group: RuntimeConfig resolved from the flags and the STRATA_* variables over the layout's
defaults, a bad value named, and the scheduler's config free of torch knobs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from strata_engine.config import ENV_VARS, EngineConfig, SchedulerConfig
from strata_engine.knobs import KNOBS
from strata_engine.runtime_config import RuntimeConfig

RUNTIME_VARIABLES = ("STRATA_ROW_TILE", "STRATA_DECODE_ALL_THREADS", "STRATA_COMPILED_GEMMS")


def test_runtime_config_resolves_from_the_environment_over_the_layouts_defaults():
    fastest = EngineConfig(batch=6, layout="fastest", compile=True, threads=1, env={}).runtime_config()
    assert fastest == RuntimeConfig(threads=1, compile=True, gemms="template", row_tile=None, decode_all_threads=False)
    assert EngineConfig(batch=6, compile=True, env={}).runtime_config().gemms == "aten"  # plain
    empty = {name: " " for name in RUNTIME_VARIABLES}  # empty is unset: the layout's value
    assert EngineConfig(batch=6, layout="fastest", compile=True, threads=1, env=empty).runtime_config() == fastest
    env = {"STRATA_ROW_TILE": "1", "STRATA_DECODE_ALL_THREADS": "1", "STRATA_COMPILED_GEMMS": "aten"}
    got = EngineConfig(batch=6, layout="fastest", compile=True, env=env).runtime_config()
    assert (got.row_tile, got.decode_all_threads, got.gemms) == (1, True, "aten")
    got = EngineConfig(executor="sim", env={"STRATA_DECODE_ALL_THREADS": "0", "STRATA_ROW_TILE": "16"})
    assert (got.runtime_config().decode_all_threads, got.runtime_config().row_tile) == (False, 16)  # 0 = off


@pytest.mark.parametrize(
    "name,value,why",
    [
        ("STRATA_ROW_TILE", "abc", r"is not a number \(a whole number >= 1 \(1 = padding off\)\)"),
        ("STRATA_ROW_TILE", "0", "is below 1"),
        ("STRATA_DECODE_ALL_THREADS", "2", "is not one of 0, 1"),
        ("STRATA_COMPILED_GEMMS", "mkl", r"is not one of aten, template \(aten or template\)"),
    ],
)
@pytest.mark.parametrize("compile", [False, True])
def test_a_bad_runtime_variable_raises_naming_it_when_the_engine_config_is_made(name, value, why, compile):
    with pytest.raises(ValueError, match=f"^{name}='{value}' {why}"):
        EngineConfig(compile=compile, env={name: value})
    with pytest.raises(ValueError, match=f"^{name}='{value}' {why}"):
        RuntimeConfig.from_env({name: value})


@pytest.mark.parametrize(
    "field,value,named",
    [
        ("threads", 0, r"threads \(--threads\) must be a whole number >= 1 or None, got 0"),
        ("compile", 1, r"compile \(--compile\) must be True or False, got 1"),
        ("gemms", "mkl", r"gemms \(STRATA_COMPILED_GEMMS\) must be one of aten, template, got 'mkl'"),
        ("row_tile", 0, r"row_tile \(STRATA_ROW_TILE\) must be a whole number >= 1 \(1 = padding off\) or None"),
        ("decode_all_threads", "yes", r"decode_all_threads \(STRATA_DECODE_ALL_THREADS\) must be True or False"),
    ],
)
def test_runtime_config_refuses_a_bad_field_naming_it_and_what_it_accepts(field, value, named):
    with pytest.raises(ValueError, match=named):
        RuntimeConfig(**{field: value})


def test_the_scheduler_config_has_no_torch_fields():
    torch_knobs = {f.name for f in fields(RuntimeConfig)}
    assert not torch_knobs & {f.name for f in fields(SchedulerConfig)}
    assert not set(RUNTIME_VARIABLES) & set(ENV_VARS)  # SchedulerConfig.with_env reads none of them
    assert {name: KNOBS[name].sets for name in RUNTIME_VARIABLES} == {
        "STRATA_ROW_TILE": "RuntimeConfig.row_tile",
        "STRATA_DECODE_ALL_THREADS": "RuntimeConfig.decode_all_threads",
        "STRATA_COMPILED_GEMMS": "RuntimeConfig.gemms",
    }


def test_the_config_groups_import_no_torch():
    code = "import sys; import strata_engine.runtime_config, strata_engine.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
