"""Progress on stderr for long benches: which run, which arm, elapsed, ETA.

One line when a run starts and one when it ends; on a terminal the current line is also refreshed every
second with the run's elapsed time. The ETA is the mean duration of the runs done so far times the runs left.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False, live: bool | None = None):
        self.total = total
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = self.stream.isatty() if live is None else live
        self.started = time.monotonic()
        self.durations: list[float] = []
        self.skipped = 0
        self._label = ""
        self._run_start = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def done(self) -> int:
        return len(self.durations) + self.skipped

    def eta(self) -> float | None:
        if not self.durations:
            return None
        return sum(self.durations) / len(self.durations) * (self.total - self.done)

    def skip(self, run_id: str) -> None:
        self.skipped += 1
        self._print(f"[{self.done}/{self.total}] {run_id}: already recorded, skipped (--resume)")

    def begin(self, index: int, run_id: str, arm: str) -> None:
        self._label = f"[{index + 1}/{self.total}] {run_id} (arm {arm})"
        self._run_start = time.monotonic()
        eta = self.eta()
        self._print(
            f"{self._label}: starting; elapsed {fmt_duration(time.monotonic() - self.started)}"
            + (f", ETA {fmt_duration(eta)}" if eta is not None else "")
        )
        if self.live and not self.quiet:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def end(self, status: str, detail: str = "") -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        took = time.monotonic() - self._run_start
        self.durations.append(took)
        eta = self.eta()
        self._print(
            f"{self._label}: {status} in {fmt_duration(took)}"
            + (f" ({detail})" if detail else "")
            + (f"; ETA {fmt_duration(eta)}" if eta else ""),
            clear=self.live,
        )

    def message(self, text: str) -> None:
        self._print(text, clear=self.live)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self.stream.write(f"\r{self._label}: running {fmt_duration(time.monotonic() - self._run_start)}\x1b[K")
                self.stream.flush()

    def _print(self, line: str, clear: bool = False) -> None:
        if self.quiet:
            return
        with self._lock:
            self.stream.write(("\r\x1b[K" if clear else "") + line + "\n")
            self.stream.flush()
