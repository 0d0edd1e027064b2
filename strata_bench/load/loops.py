"""Load generators: a closed loop at a fixed concurrency, or an open loop at a request rate.

Closed loop: `concurrency` workers, each sends its next request the moment its previous one ends, so
exactly that many are in flight until the stop rule says no more (AIPerf `--concurrency`). Open loop:
requests are sent at arrival times drawn in advance (Poisson: exponential gaps; constant: 1/rate apart;
seeded, the first at 0), whether or not earlier ones have ended; an optional cap holds a request until a
slot frees (vLLM `--max-concurrency`), its send time then being when it goes. Both stop issuing at a
request count or a duration, whichever comes first, and wait for the requests in flight to end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator

import numpy as np

Send = Callable[[int, float], Awaitable[Any]]  # (request index, scheduled offset in s) -> record


@dataclass(frozen=True)
class LoadShape:
    """How requests are issued: closed (concurrency) or open (rate, arrivals, optional cap), and when to stop."""

    mode: str  # "closed" | "open"
    concurrency: int | None = None  # closed: the workers; open: an optional cap on requests in flight
    rate: float | None = None  # open: requests per second
    arrivals: str = "poisson"  # open: "poisson" | "constant"
    requests: int | None = None  # stop issuing after this many...
    duration_s: float | None = None  # ...or after this long, whichever comes first
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise ValueError(f"load mode must be closed or open, got {self.mode!r}")
        if self.mode == "closed" and (self.concurrency is None or self.concurrency < 1):
            raise ValueError(f"a closed loop needs a concurrency >= 1, got {self.concurrency}")
        if self.mode == "closed" and self.rate is not None:
            raise ValueError("a closed loop has no request rate; give --concurrency or --rate, not both")
        if self.mode == "open" and (self.rate is None or self.rate <= 0):
            raise ValueError(f"an open loop needs a request rate > 0 per second, got {self.rate}")
        if self.mode == "open" and self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"the concurrency cap must be >= 1, got {self.concurrency}")
        if self.arrivals not in ("poisson", "constant"):
            raise ValueError(f"arrivals must be poisson or constant, got {self.arrivals!r}")
        if self.requests is None and self.duration_s is None:
            raise ValueError("give a request count or a duration (or both): a load run must stop")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"the request count must be >= 1, got {self.requests}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"the duration must be > 0 s, got {self.duration_s}")

    @property
    def label(self) -> str:
        """A sweep point's name in run ids and tables: c4, rate2.5, rate2.5-c8."""
        if self.mode == "closed":
            return f"c{self.concurrency}"
        return f"rate{self.rate:g}" + (f"-c{self.concurrency}" if self.concurrency else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k) for k in ("mode", "concurrency", "rate", "arrivals", "requests", "duration_s", "seed")
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LoadShape":
        return cls(**data)


def arrival_offsets(rate: float, arrivals: str, seed: int) -> Iterator[float]:
    """Send offsets in seconds from the run's start, the first at 0: Poisson (exponential gaps of mean
    1/rate, numpy's generator seeded with `seed`) or constant (exactly 1/rate apart). Endless."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if arrivals == "constant":  # i / rate, not a running sum: no drift over a long run
        index = 0
        while True:
            yield index / rate
            index += 1
    rng = np.random.default_rng(seed)
    offset = 0.0
    while True:
        yield offset
        offset += float(rng.exponential(1.0 / rate))


async def run_load(shape: LoadShape, send: Send, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Issue requests by `shape`, awaiting `send(index, offset)` for each; their results in index order.

    Returns {"results": [...], "issued": n, "started": clock at start, "max_in_flight": peak}.
    """
    start = clock()
    in_flight = [0, 0]  # now, peak
    results: dict[int, Any] = {}

    async def tracked(index: int, offset: float) -> None:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            results[index] = await send(index, offset)
        finally:
            in_flight[0] -= 1

    def may_issue(index: int, offset: float) -> bool:
        if shape.requests is not None and index >= shape.requests:
            return False
        return shape.duration_s is None or offset < shape.duration_s

    issued = 0
    if shape.mode == "closed":

        async def worker() -> None:
            nonlocal issued
            while True:
                index, offset = issued, clock() - start
                if not may_issue(index, offset):
                    return
                issued += 1
                await tracked(index, offset)

        assert shape.concurrency is not None
        await asyncio.gather(*(worker() for _ in range(shape.concurrency)))
    else:
        assert shape.rate is not None
        cap = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None
        tasks = []

        async def capped(index: int, offset: float) -> None:
            assert cap is not None
            try:
                await tracked(index, offset)
            finally:
                cap.release()

        for index, offset in enumerate(arrival_offsets(shape.rate, shape.arrivals, shape.seed)):
            if not may_issue(index, offset):
                break
            delay = start + offset - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if cap is not None:
                await cap.acquire()
                tasks.append(asyncio.ensure_future(capped(index, offset)))
            else:
                tasks.append(asyncio.ensure_future(tracked(index, offset)))
            issued += 1
        await asyncio.gather(*tasks)
    return {
        "results": [results[i] for i in sorted(results)],
        "issued": issued,
        "started": start,
        "max_in_flight": in_flight[1],
    }
