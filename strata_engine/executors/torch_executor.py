"""The torch executor: runs the scheduler's plans on a `Pipeline` of stages and samples tokens.

A read or mixed run is `scheduler/run_loop.py`'s loop over `_PipelineRun`, the pipeline as its stages:
chunks stream into stage 0 back to back, the run's end drains. A decode keeps one micro-batch per group
in flight, feeding each group's sampled tokens straight back, until `DecodeSpec.goes_on` says stop; then
it drains. Sampling happens here, per request, with the request's own `sampler` (runtime/sampler.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

import torch

from ..scheduler.protocol import DecodeResult, MixedResult, OnToken, RunResult
from ..model.kv_cache import trim_floor
from ..runtime.pipeline import MicroBatch, Part, Pipeline
from ..runtime.prefix_copies import PrefixCopy
from ..scheduler.run_loop import DecodeSpec, RunSpec, mixed_run, read_run
from ..scheduler.request import Phase, Request


class TorchExecutor:
    supports_prefix_cache = True  # scheduler/prompt_cache/copies.PrefixCopies: each stage copies its own layers

    def __init__(
        self,
        pipeline: Pipeline,
        clock: Callable[[], float] = time.perf_counter,
        kv_bytes_per_token: int = 0,
        kv_window: int | None = None,
    ):
        self.pipeline = pipeline
        self.clock = clock
        self.kv_bytes_per_token = kv_bytes_per_token  # 0: no host store (slots are still reused)
        self.kv_window = kv_window  # the model's sliding window: the stages let go of KV behind it
        self._floors: dict[int, int] = {}  # slot -> positions below it let go of (the stages' trim, predicted)
        self._saved_floors: dict[int, int] = {}  # stored prefix key -> the first position its copy holds
        self._pins: dict[int, int] = {}  # slot -> the first position of its pinned range (pin_prefix)
        self._read_interval_ms: float | None = None  # between chunk completions in the last read run (pause target)

    @property
    def num_stages(self) -> int:
        return self.pipeline.num_stages

    @property
    def batch_invariant(self) -> bool:
        """A row's logits are bitwise independent of the rows beside it (runtime/invariance.py)."""
        return bool(getattr(self.pipeline, "batch_invariant", False))

    @property
    def layout_invariant(self) -> bool:
        """And the same bits in any other layout or thread count that claims it (runtime/thread_probe.py)."""
        return bool(getattr(self.pipeline, "layout_invariant", False))

    def prepare_slot(self, slot: int, keep_tokens: int = 0) -> None:
        # Attention reads only positions 0..a query's own, all written by this request or kept for it
        # (the prompt cache), so what lies past them is never seen: nothing to reset.
        if keep_tokens == 0:
            self._floors[slot] = 0  # a cold read writes from position 0 again

    def kv_held(self, slot: int) -> tuple[int, int]:
        """(first position held, the fewest tokens a next request may keep): its first query must still see
        every key of its window."""
        floor = self._floors.get(slot, 0)
        return floor, 0 if floor == 0 or self.kv_window is None else floor + self.kv_window - 1

    def _submit(self, mb: MicroBatch) -> None:
        """Into the pipeline, predicting the trim each stage makes before the forward (model/kv_cache.py)."""
        if self.kv_window is not None:
            for part in mb.parts:
                for row in part.rows.rows:
                    floor = trim_floor(row.first, self.kv_window)
                    if floor > self._floors.get(row.slot, 0):
                        self._floors[row.slot] = floor
        self.pipeline.submit(mb)

    def free_slot(self, slot: int) -> None:
        pass  # the KV stays: the prompt cache may give the slot's prefix to the next request

    # -- the prompt cache's host copies: one micro-batch of no rows, each stage copying its layers -----
    def _copy(self, copy: PrefixCopy) -> None:
        if self.pipeline.in_flight:
            raise RuntimeError("prefix copies run between executor calls, with nothing in flight")
        self.pipeline.submit(MicroBatch([], copy=copy))
        _raise_first_error([self.pipeline.get()])

    def save_prefix(self, key: int, slot: int, tokens: int, first: int = 0) -> None:
        self._copy(PrefixCopy("save", key, slot, tokens, first))
        held = min(self._floors.get(slot, 0), self._pins.get(slot, tokens))  # the slot's lowest position held
        self._saved_floors[key] = max(first, held)  # what the copy starts at (KVCache.save)

    def restore_prefix(self, key: int, slot: int, tokens: int) -> None:
        self._copy(PrefixCopy("restore", key, slot, tokens))
        self._floors[slot] = self._saved_floors.get(key, 0)

    def pin_prefix(self, slot: int, first: int, tokens: int) -> None:
        self._copy(PrefixCopy("pin", 0, slot, tokens, first))
        self._pins[slot] = first  # the stages keep it from there (model/kv_cache.py), whatever the floor

    def unpin_prefix(self, slot: int) -> None:
        self._copy(PrefixCopy("unpin", 0, slot))
        self._pins.pop(slot, None)

    def drop_prefix(self, key: int) -> None:
        self._copy(PrefixCopy("drop", key))
        self._saved_floors.pop(key, None)

    def kv_generation(self) -> int:
        return int(getattr(self.pipeline, "epoch", 0))  # stage ranks that restarted lost every slot's KV

    # -- reads ---------------------------------------------------------------------------------
    @staticmethod
    def _chunk_row(request: Request, start: int, end: int) -> tuple[int, int, list[int]]:
        return (request.slot, start, list(request.prompt_ids[start:end]))

    def _read_part(self, request: Request, start: int, end: int) -> Part:
        return Part.ragged([self._chunk_row(request, start, end)], want_logits=end == request.prompt_tokens)

    def read(self, request: Request, run: RunSpec, on_token: OnToken) -> RunResult:
        stages = _PipelineRun(self, request, on_token)
        ran = read_run(stages, run, self._read_interval_ms)
        self._read_interval_ms = ran.interval_ms
        _raise_first_error(stages.results)
        first = None
        last = stages.results[-1].parts[0]
        if last.logits is not None:
            first = request.sampler.sample(last.logits[0])
            on_token(request, first)
        tokens = sum(end - start for start, end in ran.chunks)
        return RunResult(stages.now_ms(), len(ran.chunks), tokens, first)

    # -- decode --------------------------------------------------------------------------------
    @staticmethod
    def _decode_rows(rows: list[Request]) -> list[tuple[int, int, list[int]]]:
        return [(r.slot, r.next_position, [r.output_ids[-1]]) for r in rows]

    def _decode_part(self, rows: list[Request]) -> Part:
        return Part.ragged(self._decode_rows(rows), want_logits=True)

    @staticmethod
    def _live(group: Sequence[Request]) -> list[Request]:
        return [r for r in group if r.phase is Phase.DECODING and not r.cancelled]

    def _deliver(self, rows: list[Request], logits: torch.Tensor, on_token: OnToken) -> int:
        delivered = 0
        for row, request in enumerate(rows):
            if request.phase is Phase.DECODING:  # may have finished or been cancelled meanwhile
                on_token(request, request.sampler.sample(logits[row]))
                delivered += 1
        return delivered

    def decode(self, groups, on_token: OnToken, limits: DecodeSpec) -> DecodeResult:
        t0 = self.clock()
        if limits.budget_ms is None and limits.max_rounds is None:
            limits = replace(limits, max_rounds=1)
        micro_batches = tokens = 0
        started = {gi: 0 for gi in range(len(groups))}

        def feed(gi: int) -> None:
            rows = self._live(groups[gi])
            if rows:
                started[gi] += 1
                self._submit(MicroBatch([self._decode_part(rows)], tag=(gi, rows)))

        for gi in range(len(groups)):  # fill the pipeline: one micro-batch per group in flight
            feed(gi)
        errors = []
        while self.pipeline.in_flight:
            mb = self.pipeline.get()
            gi, rows = mb.tag
            micro_batches += 1
            if mb.error is not None:
                errors.append(mb)
                continue
            tokens += self._deliver(rows, mb.parts[0].logits, on_token)
            if limits.goes_on(started[gi], (self.clock() - t0) * 1000.0):
                feed(gi)
        _raise_first_error(errors)
        live_groups = max(1, sum(1 for n in started.values() if n))
        return DecodeResult((self.clock() - t0) * 1000.0, micro_batches // live_groups, tokens)

    # -- mixed read ---------------------------------------------------------------------------
    def mixed(self, request: Request, run: RunSpec, groups, on_token: OnToken) -> MixedResult:
        """Each micro-batch carries one read chunk plus the decode tokens of one group as one ragged
        forward (the decode rows share the chunk's GEMMs), so decoding slots advance every micro-batch
        and nothing drains until the run's end (`run_loop.mixed_run`: who rides, when it ends)."""
        stages = _PipelineRun(self, request, on_token, mixed=True)
        live = [g for g in groups if self._live(g)]
        ran = mixed_run(stages, run, live, self._live, self._read_interval_ms)
        _raise_first_error(stages.results)
        tokens = sum(end - start for start, end in ran.chunks)
        return MixedResult(
            stages.now_ms(), len(ran.chunks), tokens, stages.decode_tokens, tuple(stages.chunk_ms), stages.first
        )

    def close(self) -> None:
        self.pipeline.close()


class _PipelineRun:
    """`run_loop.Stages` on the pipeline: a read run's or (mixed) a mixed run's micro-batches, the tokens
    delivered as each completes; results and errors kept for the executor to raise after the drain."""

    def __init__(self, executor: TorchExecutor, request: Request, on_token: OnToken, mixed: bool = False):
        self.executor, self.pipeline, self.request, self.on_token = executor, executor.pipeline, request, on_token
        self.mixed = mixed
        self.num_stages = self.fill = executor.num_stages  # a mixed run first asks should_stop after its fill
        self.t0 = executor.clock()
        self.results: list[MicroBatch] = []  # a read run's, all; a mixed run's, those that failed
        self.chunk_ms: list[float] = []
        self.decode_tokens = 0
        self.first = None

    @property
    def in_flight(self) -> int:
        return self.pipeline.in_flight

    def ready(self, depth: int) -> bool:
        return self.pipeline.in_flight + (len(self.results) if self.mixed else 0) < depth

    def now_ms(self, wait: bool = False) -> float:
        return (self.executor.clock() - self.t0) * 1000.0

    def issue(self, chunk: tuple[int, int], rows: Sequence[Request] = ()) -> None:
        start, end = chunk
        if not self.mixed:
            self.executor._submit(MicroBatch([self.executor._read_part(self.request, start, end)]))
            return
        final = end == self.request.prompt_tokens
        row = self.executor._chunk_row(self.request, start, end)
        part = Part.ragged([row] + self.executor._decode_rows(list(rows)), want_logits=final or bool(rows))
        submitted = self.executor.clock()
        self.executor._submit(MicroBatch([part], tag=(submitted, list(rows), final)))

    def complete(self) -> tuple[float, bool]:
        mb = self.pipeline.get()
        if not self.mixed:
            self.results.append(mb)
            return self.now_ms(), mb.error is None
        submitted, rows, final = mb.tag
        self.chunk_ms.append((self.executor.clock() - submitted) * 1000.0)
        done = self.now_ms()
        if mb.error is not None:
            self.results.append(mb)
            return done, False
        if rows:
            self.decode_tokens += self.executor._deliver(rows, mb.parts[0].logits[1:], self.on_token)  # row 0: chunk
        if final:
            self.first = self.request.sampler.sample(mb.parts[0].logits[0])
            self.on_token(self.request, self.first)
        return done, True


def _raise_first_error(results: Sequence[MicroBatch]) -> None:
    for mb in results:
        if mb.error is not None:
            raise mb.error
