"""Every command in README.md and docs/*.md runs as written (at a small scale where it takes one).

The fast tests keep the docs and their checks in step: every bash/sh command has an entry in a table of
checks (reference_checks.py, measurement_checks.py; doc_checks.py says how each kind runs), each in the table
of the page it runs with, no entry is stale, and no untagged block hides commands. The slow test runs each
file's commands in order in a scratch directory that links the repository's paths, so what they write
(runs/, bench-out/, manifests) never lands in the checkout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_checks import Run, Serve, Skip, WithServer
from doc_commands import DOCS, ROOT, extract, untagged_command_blocks
from measurement_checks import CHECKS as MEASUREMENT_CHECKS
from reference_checks import CHECKS as REFERENCE_CHECKS

CHECKS = {**REFERENCE_CHECKS, **MEASUREMENT_CHECKS}

VENV_BIN = Path(sys.executable).parent
LINKED = (".venv", "strata_engine", "strata_bench", "strata_verify", "tests", "benchmarks", "scripts", "pyproject.toml")


def test_every_documented_command_has_a_check():
    missing = [f"{c.where()}: {c.key}" for c in extract() if c.key not in CHECKS]
    assert not missing, "commands in the docs with no entry in tests/docs/*_checks.py CHECKS:\n" + "\n".join(missing)


def test_each_check_is_in_the_table_of_the_page_it_runs_with():
    """A command runs with the first page that shows it: its check is in reference_checks.py when that page is
    README.md or docs/*.md, in measurement_checks.py when it is in docs/measurements/, and in one table only."""
    table_of = {}
    for c in extract():
        table_of.setdefault(c.key, "measurement" if c.path.parent.name == "measurements" else "reference")
    misplaced = [
        f"{table}_checks.py: {key}"
        for table, checks in (("reference", REFERENCE_CHECKS), ("measurement", MEASUREMENT_CHECKS))
        for key in checks
        if table_of.get(key, table) != table
    ]
    assert not misplaced, "checks in the table of a page that does not run them:\n" + "\n".join(misplaced)
    assert not set(REFERENCE_CHECKS) & set(MEASUREMENT_CHECKS), "a command with a check in both tables"


def test_no_check_is_stale():
    documented = {c.key for c in extract()}
    stale = [key for key in CHECKS if key not in documented]
    assert not stale, "CHECKS entries whose command is no longer in the docs:\n" + "\n".join(stale)


def test_command_blocks_are_tagged():
    assert untagged_command_blocks() == [], "tag these blocks ```bash so the docs test runs them"


def scratch(tmp_path: Path) -> Path:
    for name in LINKED:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "STRATA_ROOT": str(ROOT),
        "KEY": "docs-test-key",
        "PYTHONUNBUFFERED": "1",
    }


def run(text: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail\n{text}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def serve(text: str, check: Serve, cwd: Path, env: dict[str, str]) -> None:
    command = text if "--port" in text else f"{text} {check.extra}"
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("STRATA_READY url="), (
            f"{command!r} printed {line!r}; stderr:\n{proc.stderr.read()[-3000:]}"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, f"{command!r} did not exit 0 on SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


class SimServer:
    """A sim engine for the commands that talk to `$U`."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(
            ["strata-engine", "serve", "--executor", "sim", "--time-scale", "50", "--port", "0"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.url = (self.proc.stdout.readline().split("url=", 1)[-1].split() or [""])[0]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_run(doc: Path, tmp_path: Path):
    cwd, env = scratch(tmp_path), environment()
    server: SimServer | None = None
    ran, failures = [], []
    try:
        first, commands = (
            {},
            extract(),
        )  # a command shown in two docs (a reference and its measurement page) runs with the first
        for c in commands:
            first.setdefault(c.key, c.path)
        for command in (c for c in commands if c.path == doc and first[c.key] == doc):
            check = CHECKS[command.key]
            started = time.monotonic()
            if isinstance(check, Skip):
                continue
            if isinstance(check, Serve):
                serve(command.text, check, cwd, env)
            elif isinstance(check, WithServer):
                if server is None:
                    server = SimServer(cwd, env)
                    env["U"] = server.url
                result = run(command.text, cwd, env, check.timeout)
                if result.returncode != 0 or not result.stdout.strip():
                    failures.append(f"{command.where()}: exit {result.returncode}, stdout {result.stdout[-500:]!r}")
            else:
                assert isinstance(check, Run)
                text = check.command(command.text)
                result = run(text, cwd, env, check.timeout)
                if result.returncode != check.exit_code:
                    failures.append(
                        f"{command.where()}: `{text}` exited {result.returncode} (expected {check.exit_code})\n"
                        f"stdout: {result.stdout[-1500:]}\nstderr: {result.stderr[-1500:]}"
                    )
            ran.append(f"{time.monotonic() - started:6.1f} s  {command.where()}")
    finally:
        if server is not None:
            server.stop()
    print("\n".join(ran))
    assert not failures, "\n\n".join(failures)
