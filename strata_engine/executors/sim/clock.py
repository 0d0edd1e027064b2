"""A virtual clock for running the scheduler over the simulated executor in model time.

Contract: `clock()` returns the current virtual time (seconds); `sleep(dt)` moves it forward and fires
every timer (`at(t, fn)`) due on the way, each at its own time, so work scheduled "6 s later" arrives
mid-run exactly when it should. Nothing waits in wall time; single-threaded by design.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable


class VirtualClock:
    def __init__(self, start: float = 0.0):
        self.now = start
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()  # ties fire in the order they were set

    def __call__(self) -> float:
        return self.now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (t, next(self._seq), fn))

    def sleep(self, seconds: float) -> None:
        self.advance_to(self.now + max(0.0, seconds))

    def advance_to(self, target: float) -> None:
        while self._timers and self._timers[0][0] <= target:
            t, _, fn = heapq.heappop(self._timers)
            self.now = max(self.now, t)
            fn()
        self.now = max(self.now, target)

    def next_timer(self) -> float | None:
        return self._timers[0][0] if self._timers else None
