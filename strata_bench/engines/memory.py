"""Memory: the resident memory of an engine's process tree, sampled in a background thread while a run goes.

The tree is the launched process, every descendant (parent ids from /proc/<pid>/stat, listed again every
`RESCAN_S`, so stage ranks and engine-core children started late are counted) and every process still in
the session it leads (the launcher starts each engine in a session of its own: an orphan stays in it).
A sample is the sum of their `VmRSS` (/proc/<pid>/status); pages two processes share count once in each.
`stop()` gives `rss_at_start_bytes` (the first sample), `peak_rss_bytes` (the largest), the sample count
and interval, or None for both with the reason where /proc is missing. A process that exits between the
listing and the read is skipped; the bench does not sample a running server it did not start.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")
INTERVAL_S = 0.25
RESCAN_S = 1.0  # listing /proc costs ~5 ms on a small machine: the tree is listed again this often


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after "pid (comm)" (state, ppid, pgrp, session, ...; utime and stime are the
    12th and 13th), or None when the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent id, session id) of a process, or None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[1]), int(fields[3]))


def tree_pids(root: int) -> set[int]:
    """The root, its descendants and the members of the session it leads (empty when the root is gone)."""
    procs = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                procs[int(entry.name)] = stat
    if root not in procs:
        return set()
    members = {root} | ({pid for pid, (_, sid) in procs.items() if sid == root} if procs[root][1] == root else set())
    grew = True
    while grew:  # descendants: any process whose parent is a member
        new = {pid for pid, (ppid, _) in procs.items() if ppid in members} - members
        members |= new
        grew = bool(new)
    return members


def rss_bytes(pid: int) -> int:
    """A process's VmRSS in bytes; 0 when it is gone (or a kernel thread, which has none)."""
    try:
        with open(PROC / str(pid) / "status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_rss_bytes(root: int) -> int:
    return sum(rss_bytes(pid) for pid in tree_pids(root))


class RssSampler:
    """Samples `tree_rss_bytes(pid)` every `interval_s` from `start()` to `stop()`."""

    def __init__(self, pid: int, interval_s: float = INTERVAL_S):
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[int] = []
        self._pids: set[int] = set()
        self._listed_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.unavailable = (
            None if (PROC / str(os.getpid()) / "status").is_file() else "not available: no /proc on this system"
        )

    def start(self) -> "RssSampler":
        if self.unavailable is None:
            self._sample()  # the first sample is the start's
            self._thread = threading.Thread(target=self._loop, name=f"rss-{self.pid}", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        if time.monotonic() - self._listed_at >= RESCAN_S:
            self._pids, self._listed_at = tree_pids(self.pid), time.monotonic()
        total = sum(rss_bytes(pid) for pid in self._pids)
        if total:  # an empty tree (the engine gone) is no sample
            self.samples.append(total)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> dict[str, Any]:
        """The run JSON's fields; sampling ends (one last sample first, while the engine still runs)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._listed_at = float("-inf")  # the last sample lists the tree afresh
            self._sample()
        return {
            "rss_at_start_bytes": self.samples[0] if self.samples else None,
            "peak_rss_bytes": max(self.samples) if self.samples else None,
            "rss_samples": len(self.samples),
            "rss_interval_s": self.interval_s,
            **({"rss_note": self.unavailable} if self.unavailable else {}),
        }


def not_sampled(why: str) -> dict[str, Any]:
    """The run JSON's fields for a server the bench cannot sample (a running server given by URL)."""
    return {"rss_at_start_bytes": None, "peak_rss_bytes": None, "rss_note": why}
