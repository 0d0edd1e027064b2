"""Fixtures for the bench tests: a synthetic server in a subprocess on a free port, a tiny scenario, and a
benchmarks/ script loaded as a module."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata_bench.synthetic.launcher import spawn

REPO = Path(__file__).resolve().parents[2]
BENCH = str(Path(sys.executable).parent / "strata-bench")


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module, for tests of a script's own parts."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def synthetic():
    """A factory: synthetic("--pack", "3") -> URL; every server started is stopped after the test."""
    procs = []

    def make(*flags: str) -> str:
        proc, url = spawn(*flags)
        procs.append(proc)
        return url

    yield make
    for proc in procs:
        stop(proc)


TINY_SCENARIO = {
    "name": "tiny",
    "description": "two streams, a 2000-token joiner, then a 1000-token one",
    "settle_s": 0.1,
    "stream_tail_s": 0.2,
    "requests": [
        {"name": "stream", "count": 2, "role": "stream", "prompt_tokens": 8, "max_tokens": 4000},
        {
            "name": "big",
            "role": "joiner",
            "label": "the big prompt",
            "prompt_tokens": 2000,
            "at_s": 0.0,
            "max_tokens": 4,
        },
        {"name": "small", "role": "joiner", "prompt_tokens": 1000, "at_s": 0.1, "max_tokens": 4},
    ],
}


@pytest.fixture
def tiny_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY_SCENARIO))
    return path


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The real console script in a subprocess."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def assert_usage_errors(command: str, cases: list[tuple[list[str], str]], out: Path) -> None:
    """Each (args, words) of `strata-bench COMMAND` exits 2 naming `words` on stderr, and writes no `out`."""
    for args, words in cases:
        r = bench(command, *args, "--out", str(out))
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)
    assert not out.exists()
