"""Where the stage ranks come from: started here (`LocalRanks`) or joining through env:// (`JoinedRanks`).

Contract: `start()` returns the rendezvous store the head (rank 0) builds its group on, once every
stage rank can connect to it; `describe(rank)` says what is known about a rank that failed (its exit
code, or that it is stopped); `stop()` leaves no process this head started; `can_restart` says whether
the head may replace the ranks after a failure (only ranks it started itself). Local ranks run
`python -m strata_engine.cli stage` with the standard variables (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE), exactly as a rank on another machine would, and exit when their head does.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import torch.distributed as dist

from ... import knobs

STORE_TIMEOUT = datetime.timedelta(seconds=300)


class LocalRanks:
    """Stage ranks 1..S as child processes of this head, on a free port of 127.0.0.1."""

    can_restart = True

    def __init__(self, num_stages: int, stderr=None, extra_env: dict[str, str] | None = None):
        self.num_stages = num_stages
        self.world_size = num_stages + 1
        self.stderr = stderr
        self.extra_env = dict(extra_env or {})
        self.procs: list[subprocess.Popen] = []
        self.port: int | None = None

    def start(self):
        # Port 0: the store binds a free port itself, so two engines never race for one.
        store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=STORE_TIMEOUT, wait_for_workers=False)
        self.port = store.port
        env = {
            **knobs.environ(),  # the ranks inherit this process's environment, the knobs with it
            **self.extra_env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.port),
            "WORLD_SIZE": str(self.world_size),
        }
        env.pop("LOCAL_RANK", None)
        for rank in range(1, self.world_size):
            cmd = [sys.executable, "-m", "strata_engine.cli", "stage", "--parent-pid", str(os.getpid())]
            self.procs.append(
                subprocess.Popen(cmd, env={**env, "RANK": str(rank)}, stderr=self.stderr, stdin=subprocess.DEVNULL)
            )
        return store

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def describe(self, rank: int) -> str | None:
        if not 1 <= rank <= len(self.procs):
            return None
        proc = self.procs[rank - 1]
        code = proc.poll()  # None also while another thread holds the Popen's wait lock
        if code is not None:
            return _exited(code)
        state = _proc_state(proc.pid)
        if state == "T":
            return "is stopped (not scheduled)"
        if state == "Z":  # gone, not yet reaped: wait for its status (the signal that ended it) briefly
            try:
                return _exited(proc.wait(timeout=1.0))
            except subprocess.TimeoutExpired:
                return "has exited"
        return None

    def failed_rank(self) -> int | None:
        """The first rank whose process is known to be gone or stopped."""
        return next((r for r in range(1, self.world_size) if self.describe(r)), None)

    def stop(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # a stopped process ignores SIGTERM until continued; SIGKILL ends it
                proc.wait(5)
        self.procs = []


class JoinedRanks:
    """Stage ranks started elsewhere (`strata-engine stage` on each host, or torchrun) meeting this
    head through env://; this head is RANK 0 and cannot restart them."""

    can_restart = False

    def __init__(self, num_stages: int, timeout_s: float = 300.0):
        self.num_stages = num_stages
        self.world_size = num_stages + 1
        self.timeout = datetime.timedelta(seconds=timeout_s)

    def start(self):
        store, rank, world_size = next(dist.rendezvous("env://", timeout=self.timeout))
        if rank != 0:
            raise ValueError(f"the head must be RANK 0 of the rendezvous, got RANK={rank}")
        if world_size != self.world_size:
            raise ValueError(
                f"WORLD_SIZE={world_size} but {self.num_stages} stages need {self.world_size} ranks "
                "(the head plus one per stage)"
            )
        return store

    pids: Sequence[int] = ()

    def describe(self, rank: int) -> str | None:
        return None

    def failed_rank(self) -> int | None:
        return None

    def stop(self, timeout_s: float = 5.0) -> None:
        pass


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def gloo_reason(err) -> str:
    """gloo's message without its source path and its boilerplate advice."""
    text = re.sub(r"\[[^\]]*\.cc:\d+\] ", "", str(err))
    return text.split(". This is typically")[0].strip()


def _exited(code: int) -> str:
    """A rank's exit status in words: the code, and the signal's name where a signal ended it."""
    killed = code < 0 and -code in signal.valid_signals()
    return f"exited with code {code}" + (f" ({signal.Signals(-code).name})" if killed else "")
