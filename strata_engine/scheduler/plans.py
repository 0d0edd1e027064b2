"""What the scheduler decides, as typed values, and the pure function that decides it.

Contract: `plan_step` reads the scheduler's state (requests, slots, the active and parked reads,
measured times) and returns one frozen plan; it changes nothing. A plan is one step: at most one
executor call (a read run, a mixed run, a decode), so a piecewise read is a lead-in plan, then read
and boundary plans in turn. The order of the checks is the spec's: a finished read unit's boundary
(BSTOP, then BYIELD, then the decode budget), stops, the active read, parked reads, admission, decode.
The same give-way rule, asked between a run's chunks, is an interruptible run's stop predicate (`run_stop`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Sequence

from ..config import SchedulerConfig
from .batch_read import next_read_chunks, piped_decode_budget_ms, piped_read_lead_in
from .run_loop import RunSpec
from .read_policy import ReadKind, has_boundaries, mixed_gap_ms, read_budget_ms, read_kind, unit_tokens
from .prompt_cache import Placement
from .request import Phase, Request
from .slots import SlotTable

# Rounds per decode call when no read is pending; the call also stops at the first micro-batch
# boundary where a read becomes pending or a cancel arrives, so this only bounds the call's length.
IDLE_DECODE_ROUNDS = 32

Groups = tuple[tuple[Request, ...], ...]


class Start(enum.Enum):
    """How the step that runs a plan gets its read: the one in progress, a new one, or a parked one."""

    CONTINUE = "continue"
    ADMIT = "admit"  # a waiting request takes the plan's slot
    RESUME = "resume"  # the most recently parked read continues


class BoundaryAction(enum.Enum):
    """What happens at the end of a read unit that left the prompt unfinished."""

    STOP = "stop"  # the read was cancelled: BSTOP is the next plan
    YIELD = "yield"  # BYIELD: the read parks, a short waiting request takes over
    BUDGET = "budget"  # the decoding groups run for the decode budget
    NONE = "none"  # nothing decodes, or a mixed run decoded inside


@dataclass(frozen=True)
class UnitDone:
    """A read unit (run) that ended before the prompt did; its boundary is the next step."""

    tokens: int
    tokens_read: int
    read_ms: float


@dataclass(eq=False)
class ActiveRead:
    """A prompt read in progress (or parked): the scheduler's own counters for it."""

    request: Request
    started: float  # scheduler clock at READ_START
    read_ms: float = 0.0  # executor-measured read time so far (budgets excluded)
    units: int = 0  # read runs since it started or resumed; 0 = fresh (a lead-in may come first)
    led_in: bool = False  # its lead-in ran since it started or resumed
    unit_done: UnitDone | None = None  # set after a run that left the prompt unfinished, until its boundary


@dataclass(frozen=True)
class LeadInPlan:
    """Start (or resume) a read with one decode budget for the decoding groups, before its first run."""

    request: Request
    groups: Groups
    budget_ms: float
    start: Start
    slot: int | None = None  # the slot admission assigns
    placement: Placement | None = None  # admission: the slot and the prompt tokens the prompt cache gives


@dataclass(frozen=True)
class ReadPlan:
    """Read the next unit of a prompt: `chunks` as one executor run (a mixed run with `groups` riding)."""

    request: Request
    chunks: tuple[tuple[int, int], ...]
    kind: ReadKind
    start: Start = Start.CONTINUE
    slot: int | None = None  # the slot admission assigns
    groups: Groups = ()  # the mixed read's decoding groups
    budget_ms: float | None = None  # the pause target: the run stops itself before passing it
    max_gap_ms: float | None = None  # a mixed read under a pause target: decode tokens ride when due
    placement: Placement | None = None  # admission: the slot and the prompt tokens the prompt cache gives

    def run(self, should_stop: Callable[[], bool] | None = None) -> RunSpec:
        """What the executor's run gets: the chunks, the limits, and (interruptible modes) `run_stop`."""
        return RunSpec(self.chunks, should_stop, self.budget_ms, self.max_gap_ms)


@dataclass(frozen=True)
class BoundaryPlan:
    """The end of a read unit: BSTOP next, BYIELD to `to`, or `budget_ms` of decoding for `groups`."""

    read: ActiveRead
    action: BoundaryAction
    to: Request | None = None
    groups: Groups = ()
    budget_ms: float = 0.0


@dataclass(frozen=True)
class DecodePlan:
    """Decode the groups; stop as soon as a read is pending or a cancel arrives."""

    groups: Groups
    max_rounds: int | None = None


@dataclass(frozen=True)
class StopPlan:
    """Drop cancelled requests (BSTOP for those holding a slot)."""

    requests: tuple[Request, ...]


@dataclass(frozen=True)
class IdlePlan:
    """Nothing to do."""


IDLE = IdlePlan()
Plan = LeadInPlan | ReadPlan | BoundaryPlan | DecodePlan | StopPlan | IdlePlan


def give_way_candidate(
    reading: Request,
    waiting: Sequence[Request],
    slot_free: bool,
    place: Callable[[Request], Placement | None] | None = None,
) -> Request | None:
    """The first waiting request whose prompt is under half as long as the one being read, both counted in
    the tokens they read: the prompt cache's part is not read (`place` says what a waiting request would
    keep; the reading one kept `cached_tokens`). With the cache off that is the spec's rule on whole prompts.

    It needs a free slot of its own: the read that gives way keeps its slot, KV and progress.
    """
    if not slot_free:
        return None
    being_read = reading.prompt_tokens - reading.cached_tokens
    for request in waiting:
        if request.cancelled:
            continue
        placement = place(request) if place is not None else None
        if 2 * (request.prompt_tokens - (placement.keep if placement is not None else 0)) < being_read:
            return request
    return None


def run_stop(
    reading: Request,
    waiting: Callable[[], Sequence[Request]],
    slots: SlotTable,
    place: Callable[[Request], Placement | None] | None = None,
) -> Callable[[], bool]:
    """An interruptible run's should_stop (the mixed read, the pause target), asked between its chunks: the
    read was cancelled, or a short request could take over (`give_way_candidate`) without waiting a run."""

    def stop() -> bool:
        if reading.cancelled:
            return True
        return give_way_candidate(reading, waiting(), slots.choose() is not None, place) is not None

    return stop


def plan_step(
    *,
    config: SchedulerConfig,
    slots: SlotTable,
    waiting: Sequence[Request],
    reading: ActiveRead | None,
    parked: Sequence[ActiveRead],
    previous_was_read: bool,
    last_unit_ms: float,
    place: Callable[[Request], Placement | None] | None = None,
) -> Plan:
    """The next step, from state alone. `place` says where a waiting request would go (the prompt cache:
    a slot and the prompt tokens it keeps); None = the balanced free slot, nothing kept."""
    if reading is not None and reading.unit_done is not None:
        return plan_boundary(config=config, read=reading, slots=slots, waiting=waiting, place=place)
    cancelled = [r for r in waiting if r.cancelled]
    cancelled += [r for r in slots.occupied() if r.cancelled and r.phase is not Phase.FINISHED]
    if cancelled:
        return StopPlan(tuple(cancelled))

    groups = slots.decoding_groups()
    kind = read_kind(config)

    def read(active: Request, start: Start, slot: int | None, fresh: bool) -> LeadInPlan | ReadPlan:
        placement = None
        if start is Start.ADMIT:
            placement = place(active) if place is not None else Placement(slot)
            slot = placement.slot
        if fresh and piped_read_lead_in(previous_was_read, bool(groups), pieces=has_boundaries(kind)):
            budget = piped_decode_budget_ms(
                last_unit_ms, config.decode_share, config.decode_min_ms, config.decode_max_ms
            )
            return LeadInPlan(active, groups, budget, start, slot, placement)
        read_from = placement.keep if placement is not None else active.tokens_read
        chunks = next_read_chunks(read_from, active.prompt_tokens, config.prefill_chunk, unit_tokens(config))
        return ReadPlan(
            active,
            tuple(chunks),
            kind,
            start,
            slot,
            groups if kind is ReadKind.MIX else (),
            read_budget_ms(config, kind, bool(groups)),
            mixed_gap_ms(config, kind),
            placement,
        )

    if reading is not None:
        return read(reading.request, Start.CONTINUE, None, fresh=reading.units == 0 and not reading.led_in)
    free = slots.choose()
    if parked:
        top = parked[-1]
        short = give_way_candidate(top.request, waiting, free is not None, place)
        if short is not None:
            return read(short, Start.ADMIT, free, fresh=True)
        return read(top.request, Start.RESUME, None, fresh=True)
    if waiting and free is not None:
        return read(waiting[0], Start.ADMIT, free, fresh=True)
    if groups:
        return DecodePlan(merged(groups) if config.decode_merge else groups, IDLE_DECODE_ROUNDS)
    return IDLE


def merged(groups: Groups) -> Groups:
    """Every group's decoding rows as one group: with nothing to read, one micro-batch a round crosses the
    stages instead of one per group (`STRATA_PIPED_DECODE_MERGE`)."""
    return (tuple(request for group in groups for request in group),)


def plan_boundary(
    *,
    config: SchedulerConfig,
    read: ActiveRead,
    slots: SlotTable,
    waiting: Sequence[Request],
    place: Callable[[Request], Placement | None] | None = None,
) -> BoundaryPlan:
    """At the end of a read unit (the prompt not finished): 1) BSTOP, 2) BYIELD, 3) decode budget."""
    if read.request.cancelled:
        return BoundaryPlan(read, BoundaryAction.STOP)
    short = give_way_candidate(read.request, waiting, slots.choose() is not None, place)
    if short is not None:
        return BoundaryPlan(read, BoundaryAction.YIELD, to=short)
    groups = slots.decoding_groups()
    kind = read_kind(config)
    if kind is ReadKind.MIX or not groups:  # mixed runs decode inside; nobody to decode
        return BoundaryPlan(read, BoundaryAction.NONE)
    unit_ms = read.unit_done.read_ms if read.unit_done is not None else 0.0
    if kind is ReadKind.CHUNK:  # one group: the share of the chunk's time, no cap or floor
        budget = config.decode_share * unit_ms
    else:
        budget = piped_decode_budget_ms(unit_ms, config.decode_share, config.decode_min_ms, config.decode_max_ms)
    return BoundaryPlan(read, BoundaryAction.BUDGET, groups=groups, budget_ms=budget)
