"""Start and stop one engine from a command line on a free port, and keep its last output lines.

The command runs through the shell in its own process group (so `env X=1 cmd` and `X=1 cmd` both
work and stopping it stops its children). `--host 127.0.0.1 --port P` is appended unless the command
contains `{port}`. Ready means the `STRATA_READY url=...` stdout line or `GET /health` -> 200,
whichever comes first; an exit or a timeout before that is an `EngineStartError` with stderr's tail.
"""
from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx

from strata_verify.client import GateError

READY_PREFIX = "STRATA_READY url="


class EngineStartError(RuntimeError):
    """The engine exited or never became ready; `stderr_tail` holds its last stderr lines."""

    def __init__(self, message: str, stderr_tail: list[str]):
        super().__init__(message)
        self.stderr_tail = stderr_tail


def _child_env() -> dict[str, str]:
    """The gate's environment, with its own interpreter's bin directory first on PATH, so that
    `strata-engine` resolves to the engine installed beside `strata-verify` even in an inactive venv."""
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{path}" if path else bindir, "PYTHONUNBUFFERED": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def with_port(command: str, port: int, host: str = "127.0.0.1") -> str:
    """`{port}` in the command is replaced; otherwise `--host H --port P` is appended."""
    if "{port}" in command:
        return command.replace("{port}", str(port)).replace("{host}", host)
    return f"{command} --host {host} --port {port}"


@dataclass
class EngineProcess:
    """One engine process; use as a context manager (`with EngineProcess(cmd) as eng: eng.url`)."""

    command: str
    start_timeout: float = 300.0
    host: str = "127.0.0.1"
    tail_lines: int = 400

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise ValueError("engine command is empty")
        self.url: str | None = None
        self.port: int | None = None
        self.launched: str | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=self.tail_lines)
        self._stdout: collections.deque[str] = collections.deque(maxlen=50)
        self._ready_url: str | None = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "EngineProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        self.port = free_port(self.host)
        self.launched = with_port(self.command, self.port, self.host)
        self._proc = subprocess.Popen(
            self.launched, shell=True, start_new_session=True, text=True, bufsize=1,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_child_env(),
        )
        self._threads = [threading.Thread(target=self._pump, args=(self._proc.stdout, self._stdout, True), daemon=True),
                         threading.Thread(target=self._pump, args=(self._proc.stderr, self._stderr, False), daemon=True)]
        for thread in self._threads:
            thread.start()
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _pump(self, stream, sink: collections.deque, watch_ready: bool) -> None:
        for line in stream:
            line = line.rstrip("\n")
            sink.append(line)
            if watch_ready and line.startswith(READY_PREFIX):
                self._ready_url = line[len(READY_PREFIX):].strip().rstrip("/")

    def _wait_ready(self) -> str:
        fallback = f"http://{self.host}:{self.port}"
        deadline = time.monotonic() + self.start_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self._ready_url:
                    return self._ready_url
                code = self._proc.poll()
                if code is not None:
                    for thread in self._threads:
                        thread.join(timeout=2.0)  # let the last stderr lines arrive
                    raise EngineStartError(f"engine exited with status {code} before it was ready: {self.launched}",
                                           self.stderr_tail())
                try:
                    if client.get(f"{fallback}/health").status_code == 200:
                        return fallback
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise EngineStartError(f"engine not ready after {self.start_timeout:.0f} s: {self.launched}", self.stderr_tail())

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status if the process ends within `timeout` seconds, else None (it keeps running)."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for thread in self._threads:
            thread.join(timeout=2.0)
        return code

    def stderr_tail(self, lines: int = 40) -> list[str]:
        return list(self._stderr)[-lines:]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the engine's process group, SIGKILL after `grace` seconds."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is not None:  # the shell is gone; children it left in the group go too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._close_pipes()
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)  # the group this object created (start_new_session)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._close_pipes()

    def _close_pipes(self) -> None:
        for thread in self._threads:
            thread.join(timeout=2.0)
        if self._proc is not None:
            for pipe in (self._proc.stdout, self._proc.stderr):
                if pipe is not None and not pipe.closed:
                    pipe.close()


@dataclass(frozen=True)
class Target:
    """What the gate checks: an engine command (a fresh process per phase) or the URL of a running server."""

    name: str = "engine"
    command: str | None = None
    url: str | None = None
    start_timeout: float = 300.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of an engine command or a URL")
        if self.command is not None and not self.command.strip():
            raise ValueError(f"build {self.name!r}: the engine command is empty")

    @property
    def fresh(self) -> bool:
        """True when each phase gets its own engine process (a command), False for a shared URL."""
        return self.command is not None

    def describe(self) -> str:
        return self.command if self.command is not None else self.url

    def launch(self) -> "Launch":
        return Launch(self)


class Launch:
    """Context manager: a started engine (or the given URL); converts start failures to GateError."""

    def __init__(self, target: Target):
        self.target = target
        self.proc: EngineProcess | None = None
        self.url: str = target.url.rstrip("/") if target.url else ""

    def __enter__(self) -> "Launch":
        if self.target.command is not None:
            self.proc = EngineProcess(self.target.command, start_timeout=self.target.start_timeout)
            try:
                self.url = self.proc.start()
            except EngineStartError as exc:
                raise GateError(f"{self.target.name}: {exc}", exc.stderr_tail) from exc
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.proc is None:
            return
        if isinstance(exc, GateError) and not exc.stderr_tail:  # a request failed: say whether the engine died
            code = self.proc.wait_exit(2.0)
            if code is not None:
                exc.args = (f"{exc.args[0]} (engine exited with status {code})",)
            exc.stderr_tail = self.proc.stderr_tail()
        self.proc.stop()

    def gate_error(self, message: str) -> GateError:
        """A GateError naming what went wrong, with the engine's exit status and stderr when it died."""
        if self.proc is None:
            return GateError(f"{self.target.name}: {message}")
        code = self.proc.exit_code()
        state = f"engine exited with status {code}" if code is not None else "engine still running"
        return GateError(f"{self.target.name}: {message} ({state})", self.proc.stderr_tail())
