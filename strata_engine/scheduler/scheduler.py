"""The scheduler: admits requests to slots, reads prompts (one at a time), decodes, finishes.

Contract: `add` and `cancel` are thread-safe; `step` runs on one thread (the engine's loop): it plans
from state (`plans.plan_step`), runs the plan (at most one executor call), updates phases and slots
and emits events. A cancel takes effect at the next boundary (BSTOP). The sink gets every token
(`on_token(request, token) -> finish reason | None`) and exactly one `on_finish(request)` per request,
whatever ends it (`endings.py`); an exception while running one request fails that request only. No torch here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from ..config import SchedulerConfig
from ..events import EngineEvent, EventLog
from ..tokens import SampledToken
from .protocol import DecodeResult, Executor
from .endings import Endings, Sink
from .plans import (
    ActiveRead,
    BoundaryAction,
    BoundaryPlan,
    DecodePlan,
    LeadInPlan,
    Plan,
    ReadPlan,
    Start,
    StopPlan,
    UnitDone,
    plan_step,
    run_stop,
)
from .intake import Intake
from .batch_read import next_read_chunks
from .prompt_cache import Placement, PromptCache
from .run_loop import DecodeSpec
from .read_policy import ReadKind, check_executor, interruptible, read_kind, unit_tokens
from .request import Phase, Request
from .slots import SlotTable


UNIT_EVENTS = {ReadKind.PIECE: "PIECE", ReadKind.TARGET: "TARGET"}
UNIT_COUNTS = {ReadKind.PIECE: "pieces", ReadKind.TARGET: "target_runs"}


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, executor: Executor, clock: Callable[[], float], sink: Sink, events: EventLog
    ):
        self.config = config
        self.executor = executor
        self.clock = clock
        self.sink = sink
        self.events = events
        self.kind = read_kind(config)
        self.interruptible = interruptible(config)
        check_executor(config, executor)
        self.intake = Intake(config.ctx, clock)  # thread-safe: add and cancel come from other threads
        # Owned by the step thread:
        self.slots = SlotTable(config.group_slots())
        self._reading: ActiveRead | None = None
        self._parked: list[ActiveRead] = []
        self._previous_was_read = False
        self._last_unit_ms = 0.0
        self.counts = {
            "admitted": 0,
            "finished": 0,
            "pieces": 0,
            "target_runs": 0,
            "lead_ins": 0,
            "yields": 0,
            "bstops": 0,
            "read_runs": 0,
        }
        self.prompt_cache = PromptCache(config, executor, self._emit)
        self.endings = Endings(config.ctx, sink, self.intake, self._emit, self.counts, self.prompt_cache.release)
        self._on_token, self._finish = self.endings.on_token, self.endings.finish

    # -- other threads ------------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        """Queue a new request (FIFO). Raises RequestError for one the context cannot hold."""
        self.intake.add(request)

    def cancel(self, request_id: str) -> bool:
        """Mark a request cancelled; it stops at the next boundary. False if it is unknown or finished."""
        return self.intake.cancel(request_id)

    @property
    def has_work(self) -> bool:
        return self.intake.has_live

    def stats(self) -> dict[str, Any]:
        occupied = self.slots.occupied()
        return {
            "waiting": self.intake.waiting_count(),
            "reading": int(self._reading is not None),
            "parked": len(self._parked),
            "decoding": sum(1 for r in occupied if r.phase is Phase.DECODING),
            "free_slots": self.slots.size - len(occupied),
            **self.counts,
            "prompt_cache": self.prompt_cache.info(),
        }

    # -- the step thread ----------------------------------------------------------------------------
    def plan(self) -> Plan:
        return plan_step(
            config=self.config,
            slots=self.slots,
            waiting=self.intake.waiting(),
            reading=self._reading,
            parked=self._parked,
            previous_was_read=self._previous_was_read,
            last_unit_ms=self._last_unit_ms,
            place=self._place,
        )

    def _place(self, request: Request) -> Placement | None:
        return self.prompt_cache.place(request, self.slots)

    def step(self) -> bool:
        """Plan and run one step (at most one executor call). False when there was nothing to do."""
        self.endings.release(self.slots, self.executor)
        plan = self.plan()
        if isinstance(plan, StopPlan):
            self._stop(plan.requests)
        elif isinstance(plan, LeadInPlan):
            self._lead_in(plan)
        elif isinstance(plan, ReadPlan):
            self._read(plan)
        elif isinstance(plan, BoundaryPlan):
            self._boundary(plan)
        elif isinstance(plan, DecodePlan):
            epoch = self.intake.epoch()
            self._decode(plan.groups, max_rounds=plan.max_rounds, should_stop=lambda: self._interrupt(epoch))
        else:
            return False
        self.endings.release(self.slots, self.executor)
        return True

    # -- plan execution -----------------------------------------------------------------------------
    def _start(self, start: Start, request: Request, placement: Placement | None) -> None:
        if start is Start.ADMIT:
            self._admit(request, placement)
        elif start is Start.RESUME:
            active = self._parked.pop()
            active.units, active.led_in = 0, False
            request.phase = Phase.READING
            self._reading = active
            self._emit("RESUME", request, tokens_read=request.tokens_read, prompt_tokens=request.prompt_tokens)

    def _lead_in(self, plan: LeadInPlan) -> None:
        self._start(plan.start, plan.request, plan.placement)
        result = self._decode(plan.groups, budget_ms=plan.budget_ms)
        self._reading.led_in = True
        self.counts["lead_ins"] += 1
        self._emit(
            "LEADIN",
            plan.request,
            decode_ms=result.ms,
            decode_steps=result.rounds,
            decode_tokens=result.tokens,
            budget_ms=plan.budget_ms,
        )

    def _read(self, plan: ReadPlan) -> None:
        request = plan.request
        self._start(plan.start, request, plan.placement)
        active = self._reading
        # Admission kept less than planned (a restore failed): read from what it kept. Only there: a continuing
        # read's chunks are the plan's, so a planning bug shows instead of being patched over here.
        if plan.start is Start.ADMIT and plan.chunks[0][0] != request.tokens_read:
            plan = replace(
                plan,
                chunks=tuple(
                    next_read_chunks(
                        request.tokens_read, request.prompt_tokens, self.config.prefill_chunk, unit_tokens(self.config)
                    )
                ),
            )
        run = plan.run(run_stop(request, self.intake.waiting, self.slots, self._place) if self.interruptible else None)
        try:
            if plan.kind is ReadKind.MIX:
                result = self.executor.mixed(request, run, plan.groups, self._on_token)
            else:
                result = self.executor.read(request, run, self._on_token)
        except Exception as exc:  # this request's read failed: fail it alone
            self._reading = None
            self._finish(request, "error", exc)
            return
        tokens = result.tokens  # an interrupted run read fewer chunks than planned
        if not 0 < tokens <= sum(end - start for start, end in plan.chunks):
            self._reading = None
            self._finish(request, "error", RuntimeError(f"the executor read {tokens} of the run's planned tokens"))
            return
        request.tokens_read += tokens
        active.read_ms += result.ms
        active.units += 1
        self.counts["read_runs"] += 1
        self._last_unit_ms = result.ms
        self._previous_was_read = True
        unit = UnitDone(tokens, request.tokens_read, result.ms)
        if plan.kind is ReadKind.MIX:
            self._emit("MIX", request, **vars(unit), decode_tokens=result.decode_tokens, chunks=len(plan.chunks))
        if request.tokens_read >= request.prompt_tokens:
            self._read_done(active, result.first_token, unit)
        else:
            active.unit_done = unit  # its boundary is the next plan

    def _admit(self, request: Request, placement: Placement) -> None:
        slot = placement.slot
        self.intake.remove(request)
        self.slots.assign(slot, request)
        self.prompt_cache.admit(request, placement)
        request.phase = Phase.READING
        self.counts["admitted"] += 1
        now = self.clock()
        self._emit(
            "ADMIT",
            request,
            group=self.slots.group_of(slot),
            prompt_tokens=request.prompt_tokens,
            waited_ms=(now - request.arrival) * 1000.0,
        )
        self._reading = ActiveRead(request, started=now)
        self._emit(
            "READ_START",
            request,
            prompt_tokens=request.prompt_tokens,
            mode=self.kind.value,
            cached_tokens=request.cached_tokens,
        )

    def _boundary(self, plan: BoundaryPlan) -> None:
        active, request = plan.read, plan.read.request
        unit, active.unit_done = active.unit_done, None
        decode = DecodeResult(0.0, 0, 0)
        if plan.action is BoundaryAction.BUDGET and plan.budget_ms > 0:
            decode = self._decode(plan.groups, budget_ms=plan.budget_ms)
        self._unit_event(request, unit, decode)
        if plan.action is BoundaryAction.YIELD:
            request.phase = Phase.PARKED
            self._parked.append(active)
            self._reading = None
            self.counts["yields"] += 1
            self._emit("YIELDED", request, tokens_read=request.tokens_read, to=plan.to.request_id)
        # STOP: the next plan is a StopPlan for it (BSTOP), before anything else runs.

    def _unit_event(self, request: Request, unit: UnitDone, decode: DecodeResult) -> None:
        """One line per piece (PIECE) or pause-target run (TARGET), with the decode budget that followed it."""
        kind = UNIT_EVENTS.get(self.kind)
        if kind is not None:
            self.counts[UNIT_COUNTS[self.kind]] += 1
            self._emit(
                kind,
                request,
                **vars(unit),
                decode_ms=decode.ms,
                decode_steps=decode.rounds,
                decode_tokens=decode.tokens,
            )

    def _read_done(self, active: ActiveRead, first_token: SampledToken | None, unit: UnitDone) -> None:
        request = active.request
        self._reading = None
        if request.finish_reason != "error":  # before its first decode moves the slot's window past it
            self.prompt_cache.checkpoint(request)
        self._unit_event(request, unit, DecodeResult(0.0, 0, 0))
        self._emit(
            "READ_DONE",
            request,
            tokens=request.prompt_tokens,
            read_ms=active.read_ms,
            elapsed_ms=(self.clock() - active.started) * 1000.0,
        )
        if request.phase is not Phase.READING:  # finished by its first token (or failed) inside the run
            return
        if request.tokens_generated == 0:  # an executor that returns the first token instead of calling on_token
            if first_token is None:
                self._finish(
                    request, "error", RuntimeError("the executor read the whole prompt but sampled no first token")
                )
                return
            self._on_token(request, first_token)
            if request.phase is not Phase.READING:
                return
        request.phase = Phase.DECODING

    def _decode(
        self,
        groups,
        budget_ms: float | None = None,
        max_rounds: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> DecodeResult:
        if not groups:
            return DecodeResult(0.0, 0, 0)
        try:
            result = self.executor.decode(groups, self._on_token, DecodeSpec(budget_ms, max_rounds, should_stop))
        except Exception as exc:
            # An executor that knows which request failed says so with `exc.request`; otherwise every
            # request of the call is in an unknown state and fails.
            culprit = getattr(exc, "request", None)
            members = [r for g in groups for r in g]
            for request in [culprit] if culprit in members else members:
                if request.phase is not Phase.FINISHED:
                    self._finish(request, "error", exc)
            result = DecodeResult(0.0, 0, 0)
        self._previous_was_read = False
        return result

    def _stop(self, requests: Sequence[Request]) -> None:
        for request in requests:
            if request.phase is Phase.WAITING:
                self.intake.remove(request)
            else:
                self.counts["bstops"] += 1
                self._emit(
                    "BSTOP",
                    request,
                    tokens_read=request.tokens_read,
                    phase=request.phase.value,
                    tokens_generated=request.tokens_generated,
                )
                if self._reading is not None and self._reading.request is request:
                    self._reading = None
                self._parked = [a for a in self._parked if a.request is not request]
            self._finish(request, "cancelled")

    # -- helpers ------------------------------------------------------------------------------------
    def _interrupt(self, epoch: int) -> bool:
        """Stop an idle decode call: a cancel arrived, or a waiting request could start its read."""
        if self.intake.epoch() != epoch:
            return True
        if not self.intake.waiting_count():
            return False
        return self.slots.free_count() > 0 or bool(self.endings.to_release)

    def _emit(self, kind: str, request: Request | None = None, slot: int | None = None, **fields: Any) -> None:
        slot = request.slot if request is not None else slot
        rid = request.request_id if request is not None else None
        self.events.emit(EngineEvent(kind, self.clock(), slot, rid, fields))
