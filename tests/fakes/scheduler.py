"""Test doubles for the scheduler: a fake clock with timers, a recording sink and executor, a harness,
and the scenario helpers its tests share (streams that decode, cancelling them after a joiner).

The fake clock only moves when the simulated executor sleeps (or a test advances it), and fires
timers (`at(t, fn)`) at their exact time inside a sleep, so a request can arrive mid-piece. A whole
spec-sized scenario runs in model time: deterministic, in milliseconds of wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from strata_engine.config import SchedulerConfig
from strata_engine.events import EventLog
from strata_engine.scheduler.prompt_cache import NoPrefixCache
from strata_engine.scheduler.request import Request
from strata_engine.scheduler.scheduler import Scheduler
from strata_engine.executors.sim import SimExecutor
from strata_engine.executors.sim.calibrate import TimelineSink
from strata_engine.executors.sim.clock import VirtualClock
from strata_engine.executors.sim.profile import CostProfile

# A two-stage profile with round numbers: a 512-token chunk is 51.2 ms per stage, a run costs 100 ms
# fixed, a decode micro-batch ~5 ms per stage.
TEST_PROFILE = CostProfile(
    name="test",
    num_stages=2,
    read_run_ms=100.0,
    read_token_ms=0.1,
    read_token_kctx_ms=0.0,
    decode_step_ms=4.0,
    decode_seq_ms=0.5,
    decode_seq_kctx_ms=0.0,
)


FakeClock = VirtualClock  # the package's virtual clock: timers fire inside sleep, at their own time


@dataclass
class RecordingSink(TimelineSink):
    """The calibration's timeline sink, plus: a token id in `stop_ids` finishes its request, a request id
    in `fail_on` makes on_token raise, and on_finish twice for one request fails the test."""

    stop_ids: frozenset[int] = frozenset()
    fail_on: set[str] = field(default_factory=set)

    def on_token(self, request: Request, token) -> str | None:
        if request.request_id in self.fail_on:
            raise RuntimeError(f"sink failure for {request.request_id}")
        reason = super().on_token(request, token)
        return "stop" if token.token_id in self.stop_ids else reason

    def on_finish(self, request: Request) -> None:
        assert request not in self.finished, f"on_finish called twice for {request.request_id}"
        super().on_finish(request)

    def longest_gap(self, request_id: str, since: float = float("-inf"), until: float = float("inf")) -> float:
        times = [t for t in self.times(request_id) if since <= t <= until]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


class RecordingExecutor(NoPrefixCache):
    """Wraps an executor and records each call: (kind, request id or group sizes, detail). It copies no
    prefixes (`NoPrefixCache`): the prompt cache's tests run the scheduler straight over the simulator."""

    def __init__(self, inner: SimExecutor):
        self.inner = inner
        self.num_stages = inner.num_stages
        self.calls: list[tuple[str, Any, Any]] = []
        self.results: dict[int, Any] = {}  # index into calls -> what that read/decode/mixed returned
        self.fail_read: set[str] = set()
        self.asked = 0  # how often a run asked should_stop (the mixed read's and pause target's interruptible runs)
        self.budgets: list[float | None] = []  # budget_ms of each read
        self.gaps: list[float | None] = []  # max_gap_ms of each mixed run

    def _asking(self, should_stop):
        if should_stop is None:
            return None

        def ask() -> bool:
            self.asked += 1
            return should_stop()

        return ask

    def prepare_slot(self, slot: int) -> None:
        self.calls.append(("prepare", slot, None))
        self.inner.prepare_slot(slot)

    def free_slot(self, slot: int) -> None:
        self.calls.append(("free", slot, None))
        self.inner.free_slot(slot)

    def read(self, request, run, on_token):
        self.calls.append(("read", request.request_id, tuple(run.chunks)))
        self.budgets.append(run.budget_ms)
        if request.request_id in self.fail_read:
            raise RuntimeError(f"read failure for {request.request_id}")
        return self._keep(self.inner.read(request, replace(run, should_stop=self._asking(run.should_stop)), on_token))

    def decode(self, groups, on_token, limits):
        self.calls.append(("decode", tuple(len(g) for g in groups), limits.budget_ms))
        return self._keep(self.inner.decode(groups, on_token, limits))

    def mixed(self, request, run, groups, on_token):
        self.calls.append(("mixed", request.request_id, tuple(run.chunks)))
        self.gaps.append(run.max_gap_ms)
        return self._keep(
            self.inner.mixed(request, replace(run, should_stop=self._asking(run.should_stop)), groups, on_token)
        )

    def _keep(self, result: Any) -> Any:
        self.results[len(self.calls) - 1] = result
        return result

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


class Harness:
    """A scheduler over the simulated executor on a fake clock, with helpers to script arrivals."""

    def __init__(self, profile: CostProfile = TEST_PROFILE, **config: Any):
        self.config = SchedulerConfig(**config)
        self.clock = FakeClock()
        self.sim = SimExecutor(profile, clock=self.clock, sleep=self.clock.sleep, vocab_size=1000, seed=1)
        self.executor = RecordingExecutor(self.sim)
        self.sink = RecordingSink(self.clock, ctx=self.config.ctx)
        self.events = EventLog()
        self.scheduler = Scheduler(self.config, self.executor, clock=self.clock, sink=self.sink, events=self.events)
        self.requests: dict[str, Request] = {}

    def request(self, request_id: str, prompt_tokens: int, max_tokens: int = 1_000_000) -> Request:
        # distinct prompts per id, so each request has its own token sequence
        base = sum(ord(c) for c in request_id)
        request = Request(request_id, [(base + 31 * i) % 997 for i in range(prompt_tokens)], max_tokens)
        self.requests[request_id] = request
        return request

    def add(self, request_id: str, prompt_tokens: int, max_tokens: int = 1_000_000, at: float | None = None) -> Request:
        request = self.request(request_id, prompt_tokens, max_tokens)
        if at is None:
            self.scheduler.add(request)
        else:
            self.clock.at(at, lambda: self.scheduler.add(request))
        return request

    def cancel_at(self, t: float, request_id: str) -> None:
        self.clock.at(t, lambda: self.scheduler.cancel(request_id))

    def run(self, until: float | None = None, max_steps: int = 200_000) -> None:
        """Step until idle with no timers left (or the clock passes `until`)."""
        for _ in range(max_steps):
            if until is not None and self.clock.now >= until:
                return
            if self.scheduler.step():
                continue
            nxt = self.clock.next_timer()
            if nxt is None:
                return
            self.clock.advance_to(nxt)
        raise AssertionError(f"scheduler still busy after {max_steps} steps")

    def events_of(self, kind: str, request_id: str | None = None) -> list:
        return [e for e in self.events.of_kind(kind) if request_id is None or e.request_id == request_id]

    def solo_tokens(self, request_id: str, count: int) -> list[int]:
        request = self.requests[request_id]
        return [self.sim.token_for(request, i).token_id for i in range(count)]


# -- scenario helpers shared by the scheduler tests -------------------------------------------------
K = 1024
PIPED = dict(batch=6, batch_groups=2, num_stages=2, prefill_chunk=512, ctx=256 * K)


def streams(h: Harness, count: int = 4, max_tokens: int = 1_000_000) -> list[str]:
    names = [f"stream{i}" for i in range(count)]
    for name in names:
        h.add(name, 64, max_tokens=max_tokens)
    return names


def stop_streams_after(h: Harness, names: list[str], joiner: str, tail_s: float = 1.0) -> None:
    """Cancel the streams once `joiner` has its first token (checked between steps)."""

    def check() -> None:
        if h.sink.tokens.get(joiner):
            for name in names:
                h.scheduler.cancel(name)
        else:
            h.clock.at(h.clock.now + tail_s, check)

    h.clock.at(tail_s, check)


def longest_stream_gap(h: Harness, names: list[str], since: float) -> float:
    return max(h.sink.longest_gap(n, since=since) for n in names)
