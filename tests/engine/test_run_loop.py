"""The run loop both executors share, over a scripted stage machine on a virtual clock: what a read run
issues and when it ends, who rides a mixed run, and when a decode call stops."""

from __future__ import annotations

from strata_engine.scheduler.request import Phase, Request
from strata_engine.scheduler.run_loop import DecodeSpec, RunSpec, mixed_run, read_run

CHUNKS = ((0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, 60))


class Fifo:
    """A pipeline of `num_stages` stages on a virtual clock: a micro-batch takes `step_ms` a stage, goes in
    when the one before has left stage 0, and comes out in order; the issues numbered in `fail` fail."""

    fill = 2

    def __init__(self, num_stages: int = 2, step_ms: float = 10.0, fail: frozenset[int] = frozenset()):
        self.num_stages, self.step_ms, self.fail = num_stages, step_ms, fail
        self.now = 0.0
        self.done: list[tuple[float, bool]] = []  # in flight, oldest first
        self.issued: list[tuple[tuple[int, int], list]] = []
        self.stage0_free = 0.0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        return len(self.done)

    def ready(self, depth: int) -> bool:
        return self.in_flight + self.failed < depth

    def now_ms(self, wait: bool = False) -> float:
        return self.now

    def issue(self, chunk, rows=()) -> None:
        start = max(self.now, self.stage0_free)
        self.stage0_free = start + self.step_ms
        ok = len(self.issued) not in self.fail
        self.done.append((start + self.num_stages * self.step_ms, ok))
        self.issued.append((chunk, list(rows)))

    def complete(self) -> tuple[float, bool]:
        done, ok = self.done.pop(0)
        self.now = max(self.now, done)
        self.failed += not ok
        return done, ok


def test_a_run_without_limits_issues_every_chunk_at_once_and_measures_its_interval():
    stages = Fifo()
    ran = read_run(stages, RunSpec(CHUNKS), prior_interval_ms=None)
    assert ran.chunks == CHUNKS and len(stages.issued) == 6
    assert ran.interval_ms == 10.0  # one stage time between completions of a full pipeline


def test_should_stop_ends_a_read_run_before_a_chunk_and_the_chunks_in_flight_finish():
    asked = []
    stages = Fifo()
    ran = read_run(stages, RunSpec(CHUNKS, should_stop=lambda: asked.append(1) or len(asked) == 3), None)
    assert ran.chunks == CHUNKS[:3] and stages.in_flight == 0  # asked before chunks 1, 2, 3: ended before 3
    assert len(asked) == 3  # never before the first chunk


def test_a_pause_target_ends_a_read_run_by_its_own_measurements():
    stages = Fifo(step_ms=10.0)
    ran = read_run(stages, RunSpec(CHUNKS, budget_ms=45.0), prior_interval_ms=None)
    # depth 1 until the first completion (20 ms: 10 a stage); then a chunk ends (in flight + 1) x 10 ms after
    # it: the second at 40, the third at 50 by the estimate, so the run ends before the fourth
    assert ran.chunks == CHUNKS[:3]


def _decoding(request_id: str) -> Request:
    request = Request(request_id, [1, 2, 3], 10)
    request.phase = Phase.DECODING
    return request


def test_a_mixed_run_carries_the_groups_in_turn_each_once_its_last_micro_batch_is_out():
    groups = [[_decoding("a")], [_decoding("b")], [_decoding("c")]]
    stages = Fifo()
    ran = mixed_run(stages, RunSpec(CHUNKS), groups, list, prior_interval_ms=None)
    riders = [rows[0].request_id if rows else None for _, rows in stages.issued]
    assert ran.chunks == CHUNKS and riders == ["a", "b", "c", "a", "b", "c"]


def test_a_failed_micro_batch_frees_no_group_and_failures_that_empty_the_pipeline_end_the_run():
    groups = [[_decoding("a")], [_decoding("b")]]
    stages = Fifo(fail=frozenset({0}))
    ran = mixed_run(stages, RunSpec(CHUNKS), groups, list, prior_interval_ms=None)
    riders = [rows[0].request_id if rows else None for _, rows in stages.issued]
    assert riders == ["a", "b", "b", "b", "b", "b"] and ran.chunks == CHUNKS  # "a" stays busy; one deep now
    stages = Fifo(fail=frozenset({0, 1}))
    assert mixed_run(stages, RunSpec(CHUNKS), groups, list, prior_interval_ms=None).chunks == CHUNKS[:2]


def test_a_decode_call_stops_at_its_rounds_or_budget_before_asking_should_stop():
    asked = []
    spec = DecodeSpec(budget_ms=50.0, max_rounds=3, should_stop=lambda: asked.append(1) or False)
    assert spec.goes_on(2, 49.0) and len(asked) == 1
    assert not spec.goes_on(3, 0.0) and not spec.goes_on(1, 50.0) and len(asked) == 1
    assert not DecodeSpec(should_stop=lambda: True).goes_on(0, 0.0)
