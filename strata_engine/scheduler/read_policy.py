"""The read modes' policy: which read a configuration asks for, and inside a run, when it ends and who rides.

Contract: pure functions of the configuration, counts and measured times (no state, no clock, no torch).
The scheduler asks which kind of read runs (`read_kind`), how much one unit covers (`unit_tokens`) and
the run's limits (`interruptible`, `read_budget_ms`, `mixed_gap_ms`); the run loop (`run_loop.py`, both
executors') asks, inside a run, whether to issue one more chunk (`end_run`, `issue_depth`) and which
group's decode tokens ride a mixed micro-batch (`choose_rider`). The spec's own arithmetic (pieces, decode
budgets, lead-ins) is in `batch_read`.
"""

from __future__ import annotations

import enum
from typing import Callable, Sequence

from ..config import SchedulerConfig
from .batch_read import batch_read_piece


class ReadKind(enum.Enum):
    """How a prompt is read; the value is the READ_START line's `mode`."""

    CHUNK = "chunk"  # one group: one chunk per read, decode between chunks
    RUN = "run"  # pipelined groups, the default ("release"): the whole prompt in one run
    PIECE = "piece"  # the spec's pieces: one run per piece, a boundary after each
    MIX = "mix"  # mixed read: each micro-batch carries a read chunk plus a group's decode tokens
    TARGET = "target"  # pause target: a run ends itself before T ms while a slot decodes


def read_kind(config: SchedulerConfig) -> ReadKind:
    """The read behaviour the configuration selects (the mixed read wins over a pause target)."""
    if not config.pipelined:
        return ReadKind.CHUNK
    if config.read_mix:
        return ReadKind.MIX
    if config.pause_target_ms > 0:
        return ReadKind.TARGET
    if config.piped_read_piece > 0:
        return ReadKind.PIECE
    return ReadKind.RUN


def interruptible(config: SchedulerConfig) -> bool:
    """The mixed read and the pause target end a run early at a chunk boundary when a short request could
    take over or the read is cancelled, so a give-way never waits for a whole run; the spec's modes never do."""
    return config.pipelined and (config.read_mix > 0 or config.pause_target_ms > 0)


def has_boundaries(kind: ReadKind) -> bool:
    """Reads whose runs end in the spec's boundary (BSTOP, BYIELD, decode budget) and start with a lead-in
    after another read: pieces and pause-target runs. One group has boundaries but no lead-in."""
    return kind in (ReadKind.PIECE, ReadKind.TARGET)


def unit_tokens(config: SchedulerConfig) -> int:
    """Prompt tokens in the next read unit (0 = all that is left, one run).

    Explicit pieces win. A mixed read is otherwise one run: its micro-batches carry the decode tokens,
    so a piece would only add a run's fixed cost and a pause (a pause target spaces the decode tokens
    instead: `mixed_gap_ms`). A pause-target read is one run that ends itself at the target
    (`read_budget_ms`) or at a give-way."""
    if config.pipelined and config.piped_read_piece == 0:
        return 0
    return batch_read_piece(config.prefill_chunk, config.batch_groups, config.piped_read_piece)


def mixed_gap_ms(config: SchedulerConfig, kind: ReadKind) -> float | None:
    """A mixed read under a pause target carries a group's decode tokens only when the group would
    otherwise wait longer than T for its next token: fewer decode rows, a cheaper read, no pause over T."""
    return config.pause_target_ms if kind is ReadKind.MIX and config.pause_target_ms > 0 else None


def read_budget_ms(config: SchedulerConfig, kind: ReadKind, decoding: bool) -> float | None:
    """The pause target as a run budget: while a slot decodes, the executor issues no chunk that its
    own measurements say would end the run past T. With nothing decoding a boundary buys nothing (a
    short arrival interrupts the run instead), so the read costs what the release costs."""
    if kind is ReadKind.TARGET and decoding:
        return config.pause_target_ms
    return None


# -- inside a run (run_loop.py) ---------------------------------------------------------------------
def run_interval_ms(completions_ms: Sequence[float]) -> float | None:
    """The time between chunk completions of a full pipeline (one bottleneck-stage time): the mean of
    the last (up to 4) measured intervals, so attention's growth with context shows within a few
    chunks. None before two completions."""
    if len(completions_ms) < 2:
        return None
    recent = list(completions_ms[-5:])
    return (recent[-1] - recent[0]) / (len(recent) - 1)


def run_end_estimate_ms(
    completions_ms: Sequence[float],
    in_flight: int,
    now_ms: float,
    prior_interval_ms: float | None = None,
    num_stages: int = 1,
) -> float | None:
    """The pause target, measured inside a read run (times since the run's start): when the run would
    end if one more chunk were issued now. The new chunk ends (in_flight + 1) intervals after the later
    of now and the last completion; the interval is this run's (run_interval_ms) once two chunks are
    out, before that `prior_interval_ms` (the executor's previous run's), and with neither but one
    completion, that completion over the stage count: the first chunk crossed every stage after the
    run's fixed cost, so this over-estimates (safe). The run's fixed cost is inside the times already.
    None when nothing is known yet."""
    if in_flight < 0:
        raise ValueError(f"in_flight must be >= 0, got {in_flight}")
    interval = run_interval_ms(completions_ms)
    if interval is None:
        interval = prior_interval_ms
    if interval is None and completions_ms:
        interval = completions_ms[0] / num_stages
    if interval is None:
        return None
    return max(now_ms, completions_ms[-1] if completions_ms else 0.0) + (in_flight + 1) * interval


def end_run(
    should_stop: Callable[[], bool] | None,
    budget_ms: float | None,
    completions_ms: Sequence[float],
    in_flight: int,
    now_ms: float,
    prior_interval_ms: float | None,
    num_stages: int,
) -> bool:
    """Asked before each chunk after a run's first: end the run here? Yes when should_stop says so (a
    give-way or a cancel), or under a pause target when one more chunk would end the run past budget_ms
    by the completions measured so far (`run_end_estimate_ms`); unknown = go on."""
    if should_stop is not None and should_stop():
        return True
    if budget_ms is None:
        return False
    estimate = run_end_estimate_ms(completions_ms, in_flight, now_ms, prior_interval_ms, num_stages)
    return estimate is not None and estimate > budget_ms


def issue_depth(budget_ms: float | None, prior_interval_ms: float | None, completed: int, num_stages: int) -> int:
    """Chunks an interruptible run keeps in flight: one more than the stages, so the pipeline stays full
    and each further chunk is a decision; under a pause target with nothing measured yet (no previous
    run, no completion) one, so the first completion measures the chunk before a second is committed."""
    if budget_ms is not None and prior_interval_ms is None and completed == 0:
        return 1
    return num_stages + 1


def rider_interval_ms(completions_ms: Sequence[float], prior_interval_ms: float | None) -> float | None:
    """The chunk interval a mixed run judges riders by: this run's, else the previous read run's."""
    return run_interval_ms(completions_ms) or prior_interval_ms


def ride_along(since_token_ms: float, interval_ms: float | None, num_stages: int, max_gap_ms: float) -> bool:
    """A mixed read under a pause target: should a group's decode tokens ride the micro-batch issued now?
    Its token then comes S intervals from now; skipped, the next chance brings it S + 1 intervals from
    now. Ride when waiting would leave the group's streams more than max_gap_ms after their last token
    (since_token_ms ago), or when no interval is measured yet."""
    if interval_ms is None:
        return True
    return since_token_ms + (num_stages + 1) * interval_ms > max_gap_ms


def choose_rider(
    turn: int,
    ready: Sequence[bool],
    since_token_ms: Sequence[float],
    has_rows: Callable[[int], bool],
    interval_ms: float | None,
    num_stages: int,
    max_gap_ms: float | None,
) -> tuple[int | None, int]:
    """Which group's decode tokens ride the mixed micro-batch issued now: round robin from `turn`, the
    first group whose previous token is out (`ready`), that is due under a pause target (`ride_along`;
    always without one) and still has decoding rows. Returns (its index or None, the next turn)."""
    for _ in range(len(ready)):
        index = turn % len(ready)
        turn += 1
        due = max_gap_ms is None or ride_along(since_token_ms[index], interval_ms, num_stages, max_gap_ms)
        if ready[index] and due and has_rows(index):
            return index, turn
    return None, turn


def check_executor(config: SchedulerConfig, executor: object) -> None:
    """The mixed read needs `executor.mixed`: ValueError naming it. (Every run's limits travel in its
    `run_loop.RunSpec`, so no mode asks an executor for more arguments.)"""
    if read_kind(config) is ReadKind.MIX and not callable(getattr(executor, "mixed", None)):
        raise ValueError("STRATA_PIPED_READ_MIX=1 needs an executor with mixed(); this one has none")
