"""What the gate checks, and starting it: an engine command (a fresh process per phase) or a running URL.

The process itself is the shared launcher's (strata_bench.engines.launcher: a free port, `{port}` or
`--host/--port` appended, health wait, stderr kept). `Launch` turns a start failure or a failed request
into a `GateError` that names the build (in `builds`), the engine's exit status and its last stderr lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata_bench.engines.launcher import EngineProcess, LaunchError
from strata_verify.client import GateError

DEFAULT_NAME = "engine"


@dataclass(frozen=True)
class Target:
    """What the gate checks: an engine command (a fresh process per phase) or the URL of a running server."""

    name: str = DEFAULT_NAME
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

    @property
    def label(self) -> str:
        """How messages name this target: `build 'x'` in `builds`, else `engine` (or the URL)."""
        return f"build {self.name!r}" if self.name != DEFAULT_NAME else (self.url or DEFAULT_NAME)

    def describe(self) -> str:
        return self.command if self.command is not None else self.url

    def launch(self) -> "Launch":
        return Launch(self)


class Launch:
    """Context manager: a started engine (or the given URL); failures become GateErrors naming the build."""

    def __init__(self, target: Target):
        self.target = target
        self.proc: EngineProcess | None = None
        self.url: str = target.url.rstrip("/") if target.url else ""

    def __enter__(self) -> "Launch":
        if self.target.command is not None:
            self.proc = EngineProcess(
                self.target.command, name=self.target.label, start_timeout=self.target.start_timeout
            )
            try:
                self.url = self.proc.start()
            except LaunchError as exc:
                raise GateError(
                    f"{self.target.label} could not run: {str(exc).splitlines()[0]}", exc.stderr_tail
                ) from exc
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if isinstance(exc, GateError) and self.target.name != DEFAULT_NAME and not exc.args[0].startswith("build "):
            exc.args = (f"{self.target.label} could not run: {exc.args[0]}",)
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
            return GateError(f"{self.target.label}: {message}")
        code = self.proc.exit_code()
        state = f"engine exited with status {code}" if code is not None else "engine still running"
        return GateError(f"{self.target.label}: {message} ({state})", self.proc.stderr_tail())
