"""Launcher: start an engine from a command line on a free port, wait until healthy, stop it; or check a URL.

The command runs through /bin/sh in its own process group, so `env A=1 cmd`, quoting and `&&` work and
stopping reaches every process it started. `--host 127.0.0.1 --port P` is appended unless the command
holds `{port}` (and optionally `{host}`). The directory of this Python goes first on PATH, so
`strata-engine` and `python` resolve to this environment. stdout/stderr go to files (kept beside a bench's
runs, or in a temporary folder); every failure names the engine and quotes the last stderr lines.
Healthy: `GET /health` is 200, or 404 with `GET /v1/models` 200 (servers without /health).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from . import ports
from .ports import HOST, TRIES, free_port


class LaunchError(RuntimeError):
    """An engine failed to start, never became healthy, or a URL does not answer; `stderr_tail` has lines."""

    def __init__(self, message: str, stderr_tail: list[str] | None = None):
        super().__init__(message)
        self.stderr_tail = stderr_tail or []


class PortTaken(LaunchError):
    """The port we chose answers, but from a process outside the tree we started (ports.listener_is_ours)."""


def interrupt_on_sigterm() -> None:
    """Make SIGTERM end the command as Ctrl-C does: a KeyboardInterrupt in the main thread, so every engine it
    started is stopped (`EngineProcess.stop` runs on the way out) and finished runs stay saved. Python's default
    would end the process at once and leave the engines' process groups (their own sessions) running."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


ATTEMPTS = TRIES  # ports tried when another process takes the one we chose before our engine binds it


def with_port(command: str, port: int, host: str = HOST) -> str:
    """`{port}`/`{host}` in the command are replaced; otherwise `--host H --port P` is appended."""
    if "{port}" in command:
        return command.replace("{port}", str(port)).replace("{host}", host)
    return f"{command} --host {host} --port {port}"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def tail_lines(path: Path, count: int = 15) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64_000))
            return fh.read().decode("utf-8", errors="replace").splitlines()[-count:]
    except OSError:
        return []


def is_healthy(client: httpx.Client, url: str) -> bool:
    try:
        resp = client.get(f"{url}/health", timeout=5.0)
        if resp.status_code == 200:
            return True
        if resp.status_code == 404:
            return client.get(f"{url}/v1/models", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        pass
    return False


def check_url(url: str, what: str, timeout_s: float = 3.0) -> None:
    """A running server must answer now; LaunchError naming `what` (e.g. "arm 'x' (@URL)") otherwise."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client() as client:
        while not is_healthy(client, url):
            if time.monotonic() >= deadline:
                raise LaunchError(f"{what}: {url} does not answer GET /health or /v1/models")
            time.sleep(0.25)


class EngineProcess:
    """One engine started from a command; `url` is where it serves. A context manager (start/stop)."""

    def __init__(
        self,
        command: str,
        *,
        name: str = "engine",
        log_stem: Path | None = None,
        host: str = HOST,
        start_timeout: float = 300.0,
    ):
        if not command.strip():
            raise ValueError(f"{name}: the engine command is empty")
        self.name, self.command, self.host, self.start_timeout = name, command, host, start_timeout
        self._use_port(free_port(self.host))
        self._tmpdir = None if log_stem is not None else tempfile.mkdtemp(prefix="strata-engine-")
        stem = log_stem if log_stem is not None else Path(self._tmpdir) / "engine"
        self.stderr_path, self.stdout_path = stem.with_suffix(".stderr"), stem.with_suffix(".stdout")
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None  # start(): seconds from the last try's spawn until healthy

    @classmethod
    def for_arm(cls, arm, log_stem: Path, start_timeout: float) -> "EngineProcess":
        """The engine of a bench arm (`NAME=COMMAND`), named for it, its logs at `log_stem`."""
        return cls(arm.command, name=f"arm {arm.name!r}", log_stem=log_stem, start_timeout=start_timeout)

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://{self.host}:{self.port}"
        self.launched = with_port(self.command, self.port, self.host)

    def __enter__(self) -> "EngineProcess":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spawn(self) -> None:
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            try:
                self.proc = subprocess.Popen(
                    ["/bin/sh", "-c", self.launched],
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    env=child_env(),
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"{self.name}: cannot start {self.launched!r}: {exc}") from None

    def _launch(self, port: int) -> subprocess.Popen[bytes]:
        self._use_port(port)
        self.spawn()
        assert self.proc is not None
        return self.proc

    def start(self) -> str:
        """Spawn and wait until healthy; the URL. On failure the process is stopped and LaunchError raised.
        When another process answers on the chosen port (PortTaken), it starts again on a new one
        (ports.start_ours, ATTEMPTS ports in all)."""
        try:
            with httpx.Client() as client:
                _, _, self.ready_s = ports.start_ours(
                    self._launch,
                    lambda port: is_healthy(client, self.url),
                    lambda proc: self._end(),  # the logs stay for the error's stderr lines
                    timeout_s=self.start_timeout,
                    port=self.port,
                    choose=lambda: free_port(self.host),
                    tries=ATTEMPTS,
                )
        except ports.NotReady as exc:
            error = self._error(exc)
            self.stop()
            raise error from None
        except BaseException:
            self.stop()
            raise
        return self.url

    def stderr_tail(self, lines: int = 40) -> list[str]:
        return tail_lines(self.stderr_path, lines)

    def failure(self, what: str) -> str:
        tail = self.stderr_tail(15) or ["(stderr is empty)"]
        return (
            f"{self.name}: {what}\n  command: {self.launched}\n  last stderr lines ({self.stderr_path}):\n"
            + "\n".join("    " + line for line in tail)
        )

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status if the process ends within `timeout` seconds, else None (it keeps running)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until healthy; LaunchError if the process exits first or the timeout passes, PortTaken
        if another process holds its port (one port: start() is the one that tries others)."""
        assert self.proc is not None, "spawn() first"
        with httpx.Client() as client:
            try:
                return ports.wait_ours(self.proc, self.port, lambda: is_healthy(client, self.url), timeout_s)
            except ports.NotReady as exc:
                raise self._error(exc) from None

    def _error(self, exc: ports.NotReady) -> LaunchError:
        """The LaunchError for a ports.start_ours/wait_ours failure, with the command and the stderr lines."""
        if isinstance(exc, ports.Taken):
            return PortTaken(self.failure(str(exc)))
        if isinstance(exc, ports.Exited):
            what = f"the engine exited with status {exc.code} before it was healthy"
        else:
            what = f"not healthy after {exc.timeout_s:g} s"
        return LaunchError(self.failure(what), self.stderr_tail())

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after timeout_s; the exit status."""
        code = self._end(timeout_s)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        return code

    def _end(self, timeout_s: float = 10.0) -> int | None:
        """stop() but the logs: they stay for an error's stderr lines and the next try's files."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.proc.wait(timeout=10)
        finally:  # also when a second Ctrl-C lands during the wait: no engine outlives the bench
            # The shell may be gone while a child it started lingers: the group gets a last SIGKILL.
            self._signal(signal.SIGKILL)
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group this object created (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass
