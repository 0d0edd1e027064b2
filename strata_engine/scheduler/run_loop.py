"""The run loop both executors share: a read run and a mixed run, over a stage machine.

Contract: `read_run` and `mixed_run` own a run's decisions (whether to issue one more chunk: `end_run`,
`issue_depth`, should_stop; which group rides a mixed micro-batch: `choose_rider`) and drive `Stages`,
which only issues, reports what it can see (in flight, now) and hands back completions in order: the
torch executor on its pipeline, the simulator on its cost model and clock. `RunSpec` is what a run needs
beyond its request (the chunks, the stop predicate, the pause target's limits), `DecodeSpec` a decode call's
limits; the executor protocol passes both as they are. `DecodeSpec.goes_on` is when a decode stops, the one
rule both executors' decode loops ask (the loops stay two: the simulator decides per round). No torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from .read_policy import choose_rider, end_run, issue_depth, rider_interval_ms, run_interval_ms

if TYPE_CHECKING:
    from .request import Request

Chunk = tuple[int, int]


@dataclass(frozen=True)
class RunSpec:
    """One run's chunks and limits: should_stop (asked before a chunk; True ends the run there), budget_ms
    (a read under a pause target ends before it), max_gap_ms (a mixed read's riders ride only when due)."""

    chunks: tuple[Chunk, ...]
    should_stop: Callable[[], bool] | None = None
    budget_ms: float | None = None
    max_gap_ms: float | None = None

    @property
    def interruptible(self) -> bool:
        return self.should_stop is not None or self.budget_ms is not None


class Stages(Protocol):
    """An executor's pipeline as the run loop sees it; times are ms since the run's start."""

    num_stages: int
    fill: int  # a mixed run's chunks issued before should_stop is first asked

    @property
    def in_flight(self) -> int: ...

    def ready(self, depth: int) -> bool:
        """May the next micro-batch go in now, with at most `depth` in flight? False: complete one first
        (the simulator: one that is done by the time the next would go in; it keeps stage 0's pace)."""

    def now_ms(self, wait: bool = False) -> float:
        """When the next micro-batch goes in; wait: not before then on the executor's clock."""

    def issue(self, chunk: Chunk, rows: Sequence["Request"] = ()) -> None:
        """One chunk, with a mixed run's decode rows riding."""

    def complete(self) -> tuple[float, bool]:
        """The oldest micro-batch in flight: (when it completed, whether it did without an error)."""


@dataclass(frozen=True)
class DecodeSpec:
    """A decode call's limits: rounds, a budget on the executor's clock, should_stop."""

    budget_ms: float | None = None
    max_rounds: int | None = None
    should_stop: Callable[[], bool] | None = None

    def goes_on(self, rounds: int, elapsed_ms: float) -> bool:
        """One more round after `rounds`, elapsed_ms into the call? Not past max_rounds, not once the budget
        has passed, not when should_stop says stop (asked last, only if the limits allow one)."""
        if self.max_rounds is not None and rounds >= self.max_rounds:
            return False
        if self.budget_ms is not None and elapsed_ms >= self.budget_ms:
            return False
        return not (self.should_stop is not None and self.should_stop())


@dataclass(frozen=True)
class Ran:
    """What a run read, and the chunk interval the next run starts from (`run_interval_ms`)."""

    chunks: tuple[Chunk, ...]
    interval_ms: float | None


def read_run(stages: Stages, spec: RunSpec, prior_interval_ms: float | None) -> Ran:
    """One read run: every chunk unless, before one after the first, `end_run` ends it (an interruptible
    run, `issue_depth` deep; else all are issued at once); the chunks in flight finish either way."""
    chunks, num_stages = spec.chunks, stages.num_stages
    completions: list[float] = []
    issued, end = 0, len(chunks)
    while issued < end or stages.in_flight:
        depth = (
            issue_depth(spec.budget_ms, prior_interval_ms, len(completions), num_stages) if spec.interruptible else end
        )
        if issued < end and stages.ready(depth):
            if (
                issued
                and spec.interruptible
                and end_run(
                    spec.should_stop,
                    spec.budget_ms,
                    completions,
                    stages.in_flight,
                    stages.now_ms(wait=True),
                    prior_interval_ms,
                    num_stages,
                )
            ):
                end = issued
                continue
            stages.issue(chunks[issued])
            issued += 1
            continue
        completions.append(stages.complete()[0])
    return Ran(chunks[:end], run_interval_ms(completions) or prior_interval_ms)


def mixed_run(
    stages: Stages,
    spec: RunSpec,
    groups: Sequence[Sequence["Request"]],
    rows: Callable[[Sequence["Request"]], list["Request"]],
    prior_interval_ms: float | None,
) -> Ran:
    """One mixed run: each chunk a micro-batch, `num_stages` in flight, carrying the decode rows (`rows`)
    of the group `choose_rider` picks among those whose last micro-batch is out; should_stop is asked
    before each chunk after the executor's `fill`. A micro-batch that failed frees no group."""
    chunks, num_stages = spec.chunks, stages.num_stages
    completions: list[float] = []
    riding: deque[int | None] = deque()  # the group riding each micro-batch in flight
    busy: set[int] = set()
    last_token = [0.0] * len(groups)  # ms since the run's start of each group's last token
    issued, end, turn = 0, len(chunks), 0
    while True:
        if issued < end and stages.ready(num_stages):
            if issued >= stages.fill and spec.should_stop is not None:
                stages.now_ms(wait=True)
                if spec.should_stop():
                    end = issued
                    continue
            now = stages.now_ms()
            interval = None if spec.max_gap_ms is None else rider_interval_ms(completions, prior_interval_ms)
            pick, turn = choose_rider(
                turn,
                [g not in busy for g in range(len(groups))],
                [now - t for t in last_token],
                lambda g: bool(rows(groups[g])),
                interval,
                num_stages,
                spec.max_gap_ms,
            )
            if pick is not None:
                busy.add(pick)
            stages.issue(chunks[issued], rows(groups[pick]) if pick is not None else [])
            riding.append(pick)
            issued += 1
        elif stages.in_flight:
            done, ok = stages.complete()
            completions.append(done)
            group = riding.popleft()
            if ok and group is not None:
                busy.discard(group)
                last_token[group] = done
        else:  # all issued are done (a failed micro-batch leaves the rest unissued)
            return Ran(chunks[:issued], prior_interval_ms)
