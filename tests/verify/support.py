"""Helpers of the verify tests: how to run the gate's CLI, the HTTP fake engine (tests/fakes/http_engine.py) and
the fault proxy."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FAKES = HERE.parent / "fakes"  # the fake engines every test directory shares
PY = shlex.quote(sys.executable)
VERIFY = str(Path(sys.executable).parent / "strata-verify")
# The fake reads 2,000 tokens in four 512-token pieces at --scale 0.05, about 0.4 s.
SCALE = "0.05"


def fake(*flags: str) -> str:
    """Command line of the HTTP fake engine (the gate appends --host/--port)."""
    return " ".join([PY, shlex.quote(str(FAKES / "http_engine.py")), *flags])


def planted(bug: str) -> str:
    """Command line of strata-engine with one planted bug (tests/fakes/broken_engine.py); its arguments follow."""
    return f"{PY} {shlex.quote(str(FAKES / 'broken_engine.py'))} --bug {bug} --"


def proxied(mode_flags: str, *engine_flags: str) -> str:
    """Command line of the fault proxy in front of the HTTP fake engine."""
    return f"{PY} {shlex.quote(str(HERE / 'fault_proxy.py'))} {mode_flags} -- {fake(*engine_flags)}"


def verify(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real console script; output is text with stdout and stderr kept apart."""
    return subprocess.run([VERIFY, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
