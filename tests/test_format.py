"""Every Python file is as `ruff format` writes it (pyproject.toml's [tool.ruff]: 120 columns), and `ruff check`
finds nothing (its [tool.ruff.lint] rules: unused imports and names, undefined names, syntax errors).

Fix a failure with `.venv/bin/ruff format .` or what `.venv/bin/ruff check .` names; the failure prints it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_code_is_as_the_formatter_writes_it():
    from ruff.__main__ import find_ruff_bin  # the test extras install ruff (pyproject.toml)

    done = subprocess.run(
        [find_ruff_bin(), "format", "--check", "--diff", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, f"run `.venv/bin/ruff format .`:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


def test_the_linter_finds_nothing():
    from ruff.__main__ import find_ruff_bin

    done = subprocess.run([find_ruff_bin(), "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, f"run `.venv/bin/ruff check .`:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
