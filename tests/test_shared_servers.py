"""The slow suite's shared servers start once: under `-n 2 --dist loadgroup` every test that uses one of
tests/conftest.py's SHARED_SERVERS fixtures runs on the same worker. Checked on the installed pytest and
pytest-xdist with the suite's own collection hook, on a tiny generated suite: a pytest that drops xdist's
groups (pytest-dev/pytest-xdist#1386), or a hook that runs after xdist's, fails it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util, os
import pytest

_spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_collection_modifyitems = _suite.pytest_collection_modifyitems


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):  # stands in for the real server: records which worker started it
    with open(os.environ["STARTS"], "a") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return "http://stand-in"
"""

SUITE = "\n".join(
    f"def test_{i}({'vllm_server' if i % 2 else ''}):\n    __import__('time').sleep(0.2)\n" for i in range(8)
)


def test_a_shared_server_starts_once_on_two_workers(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    starts = tmp_path / "starts.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path,
        env={**os.environ, "STARTS": str(starts)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout, result.stdout
    workers = starts.read_text().split()
    assert len(workers) == 1, f"the shared server started on {workers}: the group did not hold (pytest and xdist?)"
