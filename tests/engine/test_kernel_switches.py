"""The native ops' switches and Strata's cache folder: bad values name the variable; the compile cache is kept
beside the verdicts unless the user placed it."""

from __future__ import annotations

import os

import pytest

from strata_engine.kernel_switches import (
    COMPILE_CACHE_ENV,
    cache_dir,
    compile_cache_dir,
    kernel_mode,
    keep_compile_cache,
    native_march,
)


def test_each_switch_value_and_a_bad_one_naming_the_variable():
    x = "STRATA_EXPERT_KERNEL"
    assert [kernel_mode(x, {x: v}) for v in ("0", "1", "auto", "")] == ["aten", "native", "auto", "auto"]
    with pytest.raises(ValueError, match="STRATA_CHUNK_KERNEL='yes' is not one of 0, 1, auto"):
        kernel_mode("STRATA_CHUNK_KERNEL", {"STRATA_CHUNK_KERNEL": "yes"})
    with pytest.raises(ValueError, match="STRATA_NATIVE_MARCH='x86-64-v3; rm' is not a g\\+\\+ -march value"):
        native_march({"STRATA_NATIVE_MARCH": "x86-64-v3; rm"})


def test_the_compile_cache_goes_beside_the_verdicts_unless_placed(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    keep_compile_cache()
    assert os.environ[COMPILE_CACHE_ENV] == str(tmp_path / "strata" / "inductor" / "aten-default")
    assert os.environ[COMPILE_CACHE_ENV] == str(compile_cache_dir(cache_dir() / "inductor"))
    monkeypatch.delenv(COMPILE_CACHE_ENV)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # a forced level: its own folder (another's gave other tokens)
    keep_compile_cache()
    assert os.environ[COMPILE_CACHE_ENV] == str(tmp_path / "strata" / "inductor" / "aten-avx2")
    assert compile_cache_dir(tmp_path, {"ATEN_CPU_CAPABILITY": "../x"}) == tmp_path / "aten-___x"
    monkeypatch.setenv(COMPILE_CACHE_ENV, "/elsewhere")
    keep_compile_cache()
    assert os.environ[COMPILE_CACHE_ENV] == "/elsewhere"
