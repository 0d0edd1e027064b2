"""The torch executor: runs the scheduler's plans on a `Pipeline` of stages and samples tokens.

A read run streams its chunks into stage 0 back to back and waits for all of them (the drain). A
decode keeps one micro-batch per group in flight, feeding each group's sampled tokens straight back,
until the budget, the round limit or `should_stop` says stop; then it drains. Sampling happens here,
per request, with the request's own `sampler` (runtime/sampler.py, set by the engine).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..scheduler.protocol import DecodeResult, MixedResult, OnToken, RunResult
from ..model.kv_cache import trim_floor
from ..runtime.pipeline import MicroBatch, Part, Pipeline
from ..runtime.prefix_copies import PrefixCopy
from ..scheduler.read_policy import choose_rider, end_run, issue_depth, rider_interval_ms, run_interval_ms
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

    def read(
        self,
        request: Request,
        chunks: Sequence[tuple[int, int]],
        on_token: OnToken,
        should_stop: Callable[[], bool] | None = None,
        budget_ms: float | None = None,
    ) -> RunResult:
        t0 = self.clock()
        if should_stop is None and budget_ms is None:
            for start, end in chunks:
                self._submit(MicroBatch([self._read_part(request, start, end)]))
            results = self.pipeline.drain()
        else:  # an interruptible run: read_policy says how deep to fill and whether to issue each chunk
            results, pending, completions = [], list(chunks), []
            while pending or self.pipeline.in_flight:
                depth = issue_depth(budget_ms, self._read_interval_ms, len(completions), self.num_stages)
                if pending and self.pipeline.in_flight < depth:
                    now = (self.clock() - t0) * 1000.0
                    if len(pending) < len(chunks) and end_run(
                        should_stop,
                        budget_ms,
                        completions,
                        self.pipeline.in_flight,
                        now,
                        self._read_interval_ms,
                        self.num_stages,
                    ):
                        chunks = chunks[: len(chunks) - len(pending)]
                        pending = []
                        continue
                    start, end = pending.pop(0)
                    self._submit(MicroBatch([self._read_part(request, start, end)]))
                    continue
                results.append(self.pipeline.get())
                completions.append((self.clock() - t0) * 1000.0)
            self._read_interval_ms = run_interval_ms(completions) or self._read_interval_ms
        _raise_first_error(results)
        first = None
        last = results[-1].parts[0]
        if last.logits is not None:
            first = request.sampler.sample(last.logits[0])
            on_token(request, first)
        tokens = sum(end - start for start, end in chunks)
        return RunResult((self.clock() - t0) * 1000.0, len(chunks), tokens, first)

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

    def decode(self, groups, on_token, budget_ms=None, max_rounds=None, should_stop=None) -> DecodeResult:
        t0 = self.clock()
        if budget_ms is None and max_rounds is None:
            max_rounds = 1
        micro_batches = tokens = 0
        started = {gi: 0 for gi in range(len(groups))}

        def may_continue(gi: int) -> bool:
            if max_rounds is not None and started[gi] >= max_rounds:
                return False
            if budget_ms is not None and (self.clock() - t0) * 1000.0 >= budget_ms:
                return False
            return not (should_stop is not None and should_stop())

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
            if may_continue(gi):
                feed(gi)
        _raise_first_error(errors)
        live_groups = max(1, sum(1 for n in started.values() if n))
        return DecodeResult((self.clock() - t0) * 1000.0, micro_batches // live_groups, tokens)

    # -- mixed read ---------------------------------------------------------------------------
    def mixed(self, request, chunks, groups, on_token, should_stop=None, max_gap_ms=None) -> MixedResult:
        """Each micro-batch carries one read chunk plus the decode tokens of one group as one ragged
        forward (the decode rows share the chunk's GEMMs), so decoding slots advance every micro-batch
        and nothing drains until the run's end. should_stop is asked
        before each chunk after the first; True ends the run there (the chunks in flight finish).
        Which group rides is `read_policy.choose_rider`'s choice (with max_gap_ms: only one that is due)."""
        t0 = self.clock()
        live = [gi for gi in range(len(groups)) if self._live(groups[gi])]
        pending = list(chunks)
        next_group = 0
        decode_tokens = 0
        chunk_ms: list[float] = []
        submitted_at: dict[int, float] = {}
        busy: set[int] = set()  # groups with a micro-batch in flight
        last_token = {gi: 0.0 for gi in live}  # ms since t0 of each group's last token
        completions: list[float] = []
        errors: list[MicroBatch] = []
        first = None
        seq = 0

        def submit_next() -> None:
            nonlocal next_group, seq
            start, end = pending.pop(0)
            final = end == request.prompt_tokens
            rows: list[Request] = []
            gi = None
            now = (self.clock() - t0) * 1000.0
            interval = None if max_gap_ms is None else rider_interval_ms(completions, self._read_interval_ms)
            pick, next_group = choose_rider(
                next_group,
                [g not in busy for g in live],
                [now - last_token[g] for g in live],
                lambda i: bool(self._live(groups[live[i]])),
                interval,
                self.num_stages,
                max_gap_ms,
            )
            if pick is not None:
                gi = live[pick]
                rows = self._live(groups[gi])
                busy.add(gi)
            part = Part.ragged(
                [self._chunk_row(request, start, end)] + self._decode_rows(rows), want_logits=final or bool(rows)
            )
            submitted_at[seq] = self.clock()
            self._submit(MicroBatch([part], tag=(seq, gi, rows, final)))
            seq += 1

        for _ in range(min(self.num_stages, len(pending))):
            submit_next()
        while self.pipeline.in_flight:
            mb = self.pipeline.get()
            index, gi, rows, final = mb.tag
            chunk_ms.append((self.clock() - submitted_at.pop(index)) * 1000.0)
            completions.append((self.clock() - t0) * 1000.0)
            if mb.error is not None:
                errors.append(mb)
                continue
            if gi is not None:
                busy.discard(gi)
                last_token[gi] = completions[-1]
                decode_tokens += self._deliver(rows, mb.parts[0].logits[1:], on_token)  # row 0 is the chunk
            if final:
                first = request.sampler.sample(mb.parts[0].logits[0])
                on_token(request, first)
            if pending and should_stop is not None and should_stop():
                chunks = chunks[: len(chunks) - len(pending)]
                pending.clear()
            if pending:
                submit_next()
        _raise_first_error(errors)
        tokens = sum(end - start for start, end in chunks)
        return MixedResult((self.clock() - t0) * 1000.0, len(chunks), tokens, decode_tokens, tuple(chunk_ms), first)

    def close(self) -> None:
        self.pipeline.close()


def _raise_first_error(results: Sequence[MicroBatch]) -> None:
    for mb in results:
        if mb.error is not None:
            raise mb.error
