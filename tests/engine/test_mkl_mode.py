"""MKL's reproducible mode: asked for when a model is loaded, through MKL's call; importing the package
changes no environment (strata_engine/mkl_mode.py). Each case is a fresh interpreter: MKL fixes its mode once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, os, sys
import strata_engine
out = {"env_after_import": "MKL_CBWR" in os.environ}
import torch
if sys.argv[1] == "gemm-first":
    torch.nn.functional.linear(torch.randn(8, 64), torch.randn(64, 64))
from strata_engine import mkl_mode
from strata_engine.model.weights import load_model
load_model("strata-tiny-moe")
get = mkl_mode._mkl()[0]
out.update(verdict=mkl_mode.pin(), mode=get(-1), env_after_load="MKL_CBWR" in os.environ)
print(json.dumps(out))
"""


def _run(order: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, order], capture_output=True, text=True, timeout=300, env={**clean, **env}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_a_model_pins_auto_strict_without_touching_the_environment():
    out = _run("load-first")
    assert out["env_after_import"] is False and out["env_after_load"] is False, out
    assert out["verdict"] == "AUTO,STRICT" and out["mode"] == 2 | 0x10000, out


def test_a_gemm_before_the_load_keeps_mkls_default_and_says_why():
    out = _run("gemm-first")
    assert out["mode"] == 1, out  # MKL_CBWR_OFF: the mode MKL started in
    assert "MKL ran before the model was loaded" in out["verdict"], out


@pytest.mark.parametrize("value, mode", [("COMPATIBLE", 3), ("AUTO,STRICT", 2 | 0x10000)])
def test_the_users_mkl_cbwr_wins(value, mode):
    out = _run("load-first", MKL_CBWR=value)
    assert out["mode"] == mode, out
    assert out["verdict"] == ("AUTO,STRICT" if mode == 2 | 0x10000 else f"mode {mode:#x} (the user's MKL_CBWR)"), out
