"""What the scheduler decides, as typed values, and the pure functions that decide it.

Contract: `plan_step` and `plan_boundary` read the scheduler's state (requests, slots, the active and
parked reads, measured times) and return a frozen plan; they change nothing. `Scheduler.step`
executes the plan. The order of the checks is the spec's: stops first, then give-way, then the
decode budget; a fresh piecewise read right after another read gets a lead-in budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..config import SchedulerConfig
from .batch_read import (
    batch_read_piece,
    next_read_chunks,
    piped_decode_budget_ms,
    piped_read_lead_in,
)
from .request import Phase, Request
from .slots import SlotTable

# Rounds per decode call when no read is pending; the call also stops at the first micro-batch
# boundary where a read becomes pending or a cancel arrives, so this only bounds the call's length.
IDLE_DECODE_ROUNDS = 32


@dataclass(eq=False)
class ActiveRead:
    """A prompt read in progress (or parked): the scheduler's own counters for it."""

    request: Request
    started: float  # scheduler clock at READ_START
    read_ms: float = 0.0  # executor-measured read time so far (budgets excluded)
    units: int = 0  # read runs since it started or resumed; 0 = fresh (a lead-in may come first)


@dataclass(frozen=True)
class ReadPlan:
    """Read the next unit of a prompt: `chunks` as one executor run (or one mixed run)."""

    request: Request
    chunks: tuple[tuple[int, int], ...]
    kind: str  # "chunk" (one group), "run" (pipelined, the default), "piece", "mix" (issue 7)
    start: str = "continue"  # "continue" the active read, "admit" a waiting request, "resume" a parked read
    slot: int | None = None  # the slot admission assigns
    lead_in_ms: float = 0.0  # decode budget to run before the read (0 = none)
    budget_ms: float | None = None  # issue 7's pause target: the run stops itself before passing it
    max_gap_ms: float | None = None  # issue 7's mixed read under a pause target: decode tokens ride when due


@dataclass(frozen=True)
class DecodePlan:
    """Decode the groups; with no budget, stop as soon as a read is pending or a cancel arrives."""

    groups: tuple[tuple[Request, ...], ...]
    max_rounds: int | None = None


@dataclass(frozen=True)
class StopPlan:
    """Drop cancelled requests (BSTOP for those holding a slot)."""

    requests: tuple[Request, ...]


@dataclass(frozen=True)
class IdlePlan:
    """Nothing to do."""


IDLE = IdlePlan()
Plan = ReadPlan | DecodePlan | StopPlan | IdlePlan


@dataclass(frozen=True)
class BoundaryPlan:
    """What happens at the end of a read unit that left the prompt unfinished."""

    action: str  # "stop" (BSTOP next), "yield" (BYIELD to `to`), "budget" (decode budget_ms), "none"
    to: Request | None = None
    budget_ms: float = 0.0


def read_kind(config: SchedulerConfig) -> str:
    """The read behaviour the configuration selects."""
    if not config.pipelined:
        return "chunk"
    if config.read_mix:
        return "mix"
    if config.piped_read_piece > 0 or config.pause_target_ms > 0:
        return "piece"
    return "run"


def interruptible(config: SchedulerConfig) -> bool:
    """Issue 7's modes end a read run early at a chunk boundary when a short request could take over
    or the read is cancelled, so a give-way never waits for a whole run; the spec's modes never do."""
    return config.pipelined and (config.read_mix > 0 or config.pause_target_ms > 0)


def unit_tokens(config: SchedulerConfig) -> int:
    """Prompt tokens in the next read unit (0 = all that is left, one run).

    Explicit pieces win. A mixed read is otherwise one run: its micro-batches carry the decode tokens,
    so a piece would only add a run's fixed cost and a pause (a pause target spaces the decode tokens
    instead: `mixed_gap_ms`). A pause-target read is one run that ends itself at the target
    (`read_budget_ms`) or at a give-way."""
    if config.pipelined and config.piped_read_piece == 0:
        return 0
    return batch_read_piece(config.prefill_chunk, config.batch_groups, config.piped_read_piece)


def mixed_gap_ms(config: SchedulerConfig, kind: str) -> float | None:
    """A mixed read under a pause target carries a group's decode tokens only when the group would
    otherwise wait longer than T for its next token: fewer decode rows, a cheaper read, no pause over T."""
    return config.pause_target_ms if kind == "mix" and config.pause_target_ms > 0 else None


def read_budget_ms(config: SchedulerConfig, kind: str, decoding: bool) -> float | None:
    """The pause target as a run budget: while a slot decodes, the executor issues no chunk that its
    own measurements say would end the run past T. With nothing decoding a boundary buys nothing (a
    short arrival interrupts the run instead), so the read costs what the release costs."""
    if kind == "piece" and config.pause_target_ms > 0 and decoding:
        return config.pause_target_ms
    return None


def give_way_candidate(reading: Request, waiting: Sequence[Request], slot_free: bool) -> Request | None:
    """The first waiting request whose prompt is under half as long as the one being read.

    It needs a free slot of its own: the read that gives way keeps its slot, KV and progress.
    """
    if not slot_free:
        return None
    for request in waiting:
        if not request.cancelled and 2 * request.prompt_tokens < reading.prompt_tokens:
            return request
    return None


def plan_step(
    *,
    config: SchedulerConfig,
    slots: SlotTable,
    waiting: Sequence[Request],
    reading: ActiveRead | None,
    parked: Sequence[ActiveRead],
    previous_was_read: bool,
    last_unit_ms: float,
) -> Plan:
    """The next action, from state alone."""
    cancelled = [r for r in waiting if r.cancelled]
    cancelled += [r for r in slots.occupied() if r.cancelled and r.phase is not Phase.FINISHED]
    if cancelled:
        return StopPlan(tuple(cancelled))

    groups = slots.decoding_groups()
    kind = read_kind(config)

    def read(active: Request, start: str, slot: int | None, fresh: bool) -> ReadPlan:
        chunks = next_read_chunks(active.tokens_read, active.prompt_tokens, config.prefill_chunk, unit_tokens(config))
        lead_in = 0.0
        if fresh and piped_read_lead_in(previous_was_read, bool(groups), pieces=kind == "piece"):
            lead_in = piped_decode_budget_ms(last_unit_ms, config.decode_share, config.decode_min_ms, config.decode_max_ms)
        return ReadPlan(active, tuple(chunks), kind, start, slot, lead_in, read_budget_ms(config, kind, bool(groups)),
                        mixed_gap_ms(config, kind))

    if reading is not None:
        return read(reading.request, "continue", None, fresh=reading.units == 0)
    free = slots.choose()
    if parked:
        top = parked[-1]
        short = give_way_candidate(top.request, waiting, free is not None)
        if short is not None:
            return read(short, "admit", free, fresh=True)
        return read(top.request, "resume", None, fresh=True)
    if waiting and free is not None:
        return read(waiting[0], "admit", free, fresh=True)
    if groups:
        return DecodePlan(groups, IDLE_DECODE_ROUNDS)
    return IDLE


def plan_boundary(
    *,
    config: SchedulerConfig,
    read: ActiveRead,
    unit_ms: float,
    kind: str,
    slots: SlotTable,
    waiting: Sequence[Request],
) -> BoundaryPlan:
    """At the end of a read unit (the prompt not finished): 1) BSTOP, 2) BYIELD, 3) decode budget."""
    if read.request.cancelled:
        return BoundaryPlan("stop")
    short = give_way_candidate(read.request, waiting, slots.choose() is not None)
    if short is not None:
        return BoundaryPlan("yield", to=short)
    if kind == "mix" or not slots.decoding_groups():  # mixed runs decode inside; nobody to decode
        return BoundaryPlan("none")
    if kind == "chunk":  # one group: the share of the chunk's time, no cap or floor
        return BoundaryPlan("budget", budget_ms=config.decode_share * unit_ms)
    return BoundaryPlan(
        "budget", budget_ms=piped_decode_budget_ms(unit_ms, config.decode_share, config.decode_min_ms, config.decode_max_ms)
    )
