"""The synthetic server's launcher: `spawn` starts `python -m strata_bench.synthetic` in a subprocess on a
free port and hands back the process and its URL once /health answers (the bench's tests and benchmarks)."""

from __future__ import annotations

import subprocess
import sys
from typing import Callable

import httpx

from ..engines import ports


def spawn(
    *flags: str, timeout_s: float = 30.0, attempts: int = 3, choose: Callable[[], int] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server in a subprocess on a free port; (process, URL) once /health answers 200 from it
    (on a port another process took first, again on a new one: engines.ports.start_ours). `choose` gives
    the ports (engines.ports.free_port; a test hands one that another process holds)."""
    started: list[subprocess.Popen[bytes]] = []

    def launch(port: int) -> subprocess.Popen[bytes]:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "strata_bench.synthetic", "--port", str(port), *flags],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
        return started[-1]

    def answers(port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(proc: subprocess.Popen[bytes]) -> None:
        proc.kill()
        proc.wait()

    try:
        proc, port, _ = ports.start_ours(
            launch, answers, stop, timeout_s=timeout_s, choose=choose or ports.free_port, tries=attempts, poll_s=0.05
        )
    except ports.Taken:
        raise RuntimeError(f"every port tried ({attempts}) was taken by another process") from None
    except ports.Exited:
        stderr = started[-1].stderr
        raise RuntimeError(f"the synthetic server exited: {stderr.read().decode() if stderr else ''}") from None
    except ports.TimedOut:
        raise RuntimeError(f"the synthetic server did not answer /health within {timeout_s:g} s") from None
    return proc, f"http://127.0.0.1:{port}"
