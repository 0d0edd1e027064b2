"""Helpers of the verify tests: how to run the gate's CLI and the fake engine / fault proxy commands."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = shlex.quote(sys.executable)
VERIFY = str(Path(sys.executable).parent / "strata-verify")
# The fake reads 2,000 tokens in four 512-token pieces at --scale 0.05, about 0.4 s.
SCALE = "0.05"


def fake(*flags: str) -> str:
    """Command line of the synthetic engine (the gate appends --host/--port)."""
    return " ".join([PY, shlex.quote(str(HERE / "fake_engine.py")), *flags])


def proxied(mode_flags: str, *engine_flags: str) -> str:
    """Command line of the fault proxy in front of the synthetic engine."""
    return f"{PY} {shlex.quote(str(HERE / 'fault_proxy.py'))} {mode_flags} -- {fake(*engine_flags)}"


def verify(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real console script; output is text with stdout and stderr kept apart."""
    return subprocess.run([VERIFY, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
