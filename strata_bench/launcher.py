"""Launcher: start an arm's engine on a free port, wait until healthy, stop it (SIGTERM, then SIGKILL).

The command runs through /bin/sh in its own process group, so `env A=1 cmd`, quoting and `&&` work and
stopping reaches every process it started. The directory of this Python goes first on PATH, so
`strata-engine` and `python` resolve to the bench's own environment. stdout/stderr go to files kept in
the bench directory; every failure message names the arm and quotes the last stderr lines.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .arms import Arm

HOST = "127.0.0.1"


class LaunchError(RuntimeError):
    """An engine failed to start, never became healthy, or a URL does not answer."""


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def tail_lines(path: Path, count: int = 15) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64_000))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return "(no stderr file)"
    return "\n".join(lines[-count:]) if lines else "(stderr is empty)"


def is_healthy(client: httpx.Client, url: str) -> bool:
    """GET /health is 200; a server without /health (404) counts when GET /v1/models is 200."""
    try:
        resp = client.get(f"{url}/health", timeout=5.0)
        if resp.status_code == 200:
            return True
        if resp.status_code == 404:
            return client.get(f"{url}/v1/models", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        pass
    return False


def check_url(arm: Arm, timeout_s: float = 3.0) -> None:
    """Before anything runs: a URL arm must answer now."""
    assert arm.url is not None
    deadline = time.monotonic() + timeout_s
    with httpx.Client() as client:
        while True:
            if is_healthy(client, arm.url):
                return
            if time.monotonic() >= deadline:
                raise LaunchError(f"arm {arm.name!r}: {arm.url} does not answer GET /health or /v1/models")
            time.sleep(0.25)


class EngineProcess:
    """One engine started for one run; `url` is where it serves."""

    def __init__(self, arm: Arm, log_stem: Path, host: str = HOST):
        self.arm = arm
        self.port = free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.command = arm.command_for(host, self.port)
        self.stderr_path = log_stem.with_suffix(".stderr")
        self.stdout_path = log_stem.with_suffix(".stdout")
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "wb")
        self._stdout = open(self.stdout_path, "wb")
        try:
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command], stdout=self._stdout, stderr=self._stderr,
                stdin=subprocess.DEVNULL, env=child_env(), start_new_session=True,
            )
        except OSError as exc:
            self._close_files()
            raise LaunchError(f"arm {arm.name!r}: cannot start {self.command!r}: {exc}") from None

    def failure(self, what: str) -> str:
        return f"arm {self.arm.name!r}: {what}\n  command: {self.command}\n  last stderr lines ({self.stderr_path}):\n" + \
            "\n".join("    " + line for line in tail_lines(self.stderr_path).splitlines())

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until healthy; LaunchError if the process exits first or the timeout passes."""
        start = time.monotonic()
        with httpx.Client() as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise LaunchError(self.failure(f"the engine exited with status {code} before it was healthy"))
                if is_healthy(client, self.url):
                    return time.monotonic() - start
                if time.monotonic() - start > timeout_s:
                    raise LaunchError(self.failure(f"not healthy after {timeout_s:g} s (--health-timeout)"))
                time.sleep(0.1)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after timeout_s; the exit status."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # The shell may be gone while a child it started lingers: the group gets a last SIGKILL.
        self._signal(signal.SIGKILL)
        self._close_files()
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_files(self) -> None:
        for fh in (self._stderr, self._stdout):
            if not fh.closed:
                fh.close()
