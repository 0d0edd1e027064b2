"""The head's side of the distributed stages: `Pipeline`'s interface over stage ranks of a gloo group.

Contract: `DistPipeline` has `submit`, `get`, `drain`, `in_flight`, `num_stages`, `close` and returns the
same `MicroBatch` objects in submission order with each part's logits (or `error`). The head is rank 0
and runs no stage: it sends each micro-batch as one frame to rank 1 and receives the logits from rank S;
micro-batches of every group are in flight at once and nothing waits for the stages but `get`. Every
`get` has a timeout: a rank that dies or stops answering fails everything in flight, and everything
submitted until the ranks are back, with a `StageRankError` naming the rank; `health()` says so. Ranks
this head started are restarted in the background (`LocalRanks`); joined ranks are not (503 until the
job is restarted). A micro-batch that continues a slot whose KV cache was lost with a restart fails too.
"""

from __future__ import annotations

import collections
import datetime
import pickle
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...runtime_config import RuntimeConfig
from ..compiled_step import compile_info
from ..invariance import padded_rows
from ..pipeline import MicroBatch
from ..stage_plan import StagePlan
from .ranks import gloo_reason as _reason
from .stage import CONTROL, DATA, SPEC_BYTES, StageSpec, _Sender, make_group
from .wire import Kind, WirePart, decode, encode


class StageRankError(RuntimeError):
    """A stage rank is gone, stopped answering, or could not start; the message names it."""


# Results the head lets pile up in the ring before it takes one off: each rank's send waits for the next
# rank's receive, so an uninterruptible read (all chunks submitted before the first get) of 32 chunks
# once filled the ring and hung it until a send timed out. More than two per stage buys no overlap.
MAX_UNRECEIVED = 4


@dataclass
class _Pending:
    seq: int
    mb: MicroBatch
    epoch: int
    sent: bool
    frame: object = None  # its result, when taken off the ring before its get()


class DistPipeline:
    def __init__(
        self,
        ranks,
        stages: Sequence[StagePlan],
        model: str,
        num_slots: int,
        ctx: int,
        dtype: torch.dtype,
        hidden_size: int,
        vocab_size: int,
        runtime: RuntimeConfig,
        timeout_s: float = 60.0,
        max_tokens: int | None = None,
        startup_timeout_s: float = 300.0,
        kv_dtype: str | None = None,
    ):
        """runtime: the torch runtime's knobs (runtime_config.py), its row tile resolved (STRATA_ROW_TILE or the
        probed one: backends._dist_pipeline), handed to every stage rank in its StageSpec."""
        self.stages = list(stages)
        self.ranks = ranks
        self.timeout_s, self.startup_timeout_s = timeout_s, startup_timeout_s
        self.max_tokens = max_tokens or ctx + num_slots  # token positions in one micro-batch, all parts
        if runtime.row_tile is None:  # the head pads to it too, so it cannot wait for the ranks' probes
            raise ValueError("DistPipeline needs runtime.row_tile resolved (invariance.default_row_tile where unset)")
        self.runtime = runtime  # as the ranks get it
        self.row_tile = row_tile = runtime.row_tile
        itemsize = torch.empty(0, dtype=dtype).element_size()
        padded = self.max_tokens + 2 * row_tile  # each part's hidden states are padded to the row tile
        capacity = 65536 + 32 * padded + max(padded * hidden_size * itemsize, (num_slots + 1) * vocab_size * 4)
        self.specs = [
            StageSpec(
                p.index,
                p.device,
                p.layer_start,
                p.layer_end,
                len(stages),
                str(model),
                num_slots,
                ctx,
                str(dtype).replace("torch.", ""),
                runtime,
                capacity,
                timeout_s,
                kv_dtype,
            )
            for p in self.stages
        ]
        self.batch_invariant = self.layout_invariant = False  # until every stage rank's own probes say so (READY)
        self.capacity = capacity
        self._hidden_size, self._vocab_size = hidden_size, vocab_size
        self.in_flight = self.epoch = self._seq = 0
        self._pending: collections.deque[_Pending] = collections.deque()
        self._slot_epoch: dict[int, int] = {}
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._restarting: threading.Thread | None = None
        self._closed = False
        self._group = None
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def world_size(self) -> int:
        return len(self.stages) + 1

    # -- start -------------------------------------------------------------------------------
    def _start(self) -> None:
        store = self.ranks.start()
        group = make_group(store, 0, self.world_size)
        for rank, spec in enumerate(self.specs, start=1):
            group.send([encode(Kind.SPEC, rank, data=spec.to_json())], rank, CONTROL).wait()
        timeout = datetime.timedelta(seconds=self.startup_timeout_s)
        ready = []
        for rank in range(1, self.world_size):
            buffer = torch.empty(SPEC_BYTES, dtype=torch.uint8)
            try:
                group.recv([buffer], rank, CONTROL).wait(timeout)
            except RuntimeError as err:
                known = self._failed_rank(wait_s=2.0) == rank and self.ranks.describe(rank)
                raise StageRankError(self._name(rank, f"did not start: {known or _reason(err)}")) from None
            if (frame := decode(buffer)).kind != Kind.READY:
                raise StageRankError(self._name(rank, f"failed to start: {frame.data.decode(errors='replace')}"))
            ready.append(frame.data.decode())
        # each rank's probes (invariance.py, thread_probe.py) and compiled step, as its READY says
        self.batch_invariant = all(line.endswith("invariant 1") for line in ready)
        self.layout_invariant = self.batch_invariant and all(" layout 1 " in line for line in ready)
        self.compile_info = compile_info(
            [(int(g), float(s)) for line in ready for g, s in re.findall(r"graphs (\d+) compile_s ([\d.]+)", line)],
            self.runtime.gemms,
        )
        self._group = group
        self._sender = _Sender(group, 1, self.timeout_s)
        self._buffers = [torch.empty(self.capacity, dtype=torch.uint8) for _ in range(2)]
        self._current = 0
        self._receive = group.recv([self._buffers[0]], self.world_size - 1, DATA)

    def _name(self, rank: int, what: str) -> str:
        plan = self.stages[rank - 1]  # rank r runs stage plan r - 1 (the head's own, not the spec it sent)
        return f"stage rank {rank} (stage {plan.index}, layers {plan.layer_start}-{plan.layer_end - 1}, {plan.device}) {what}"

    # -- the pipeline interface ------------------------------------------------------------------
    def submit(self, mb: MicroBatch) -> None:
        self.in_flight += 1
        seq, self._seq = self._seq, self._seq + 1
        with self._lock:
            self._pending.append(entry := _Pending(seq, mb, self.epoch, sent=False))
            if self._broken is not None or mb.error is not None:
                return
            mb.error = self._check(mb)
            if mb.error is not None:
                return
            parts = [WirePart.of(p) for p in mb.parts]
            try:  # a prefix copy (the prompt cache) is a COPY frame, in order with the work
                self._sender.send(
                    encode(Kind.COPY, seq, data=mb.copy.to_text()) if mb.copy else encode(Kind.WORK, seq, parts)
                )
            except RuntimeError as err:
                self._fail(self._name(1, f"cannot be reached: {err}"), 1)
                return
            entry.sent = True
            self._take_early()

    def _take_early(self) -> None:
        """Receive the oldest results ahead of their get() until at most MAX_UNRECEIVED are in the ring."""
        waiting = [e for e in self._pending if e.sent and e.frame is None and e.epoch == self.epoch]
        while len(waiting) > MAX_UNRECEIVED and self._broken is None:
            frame = self._receive_frame()
            if frame is None:
                return
            for wire in frame.parts:  # the payloads are views of a receive buffer that the next receives reuse
                wire.payload = None if wire.payload is None else wire.payload.clone()
            waiting.pop(0).frame = frame

    def _check(self, mb: MicroBatch) -> BaseException | None:
        if mb.copy is not None and mb.copy.op == "restore":
            self._slot_epoch[mb.copy.slot] = self.epoch  # a restored slot's KV is this generation's
        tokens = sum(p.positions.numel() for p in mb.parts)
        if tokens > self.max_tokens:
            return ValueError(f"a micro-batch of {tokens} token positions exceeds the stage frames' {self.max_tokens}")
        for part in mb.parts:
            for slot, first in ((row.slot, row.first) for row in part.rows.rows):
                if first == 0:
                    self._slot_epoch[slot] = self.epoch
                elif self._slot_epoch.get(slot, self.epoch) != self.epoch:
                    return StageRankError(f"slot {slot}'s KV cache was lost when the stage ranks restarted")
        return None

    def get(self) -> MicroBatch:
        if not self._pending:
            raise RuntimeError("get() with no micro-batch in flight")
        entry = self._pending.popleft()
        self.in_flight -= 1
        mb = entry.mb
        if not entry.sent:
            with self._lock:
                mb.error = mb.error or StageRankError(self._broken or "the stage ranks were not reachable")
            return mb
        with self._lock:
            frame = entry.frame
            if frame is None and (entry.epoch != self.epoch or self._broken is not None):
                mb.error = StageRankError(
                    self._broken or "the stage ranks restarted while this micro-batch was in flight"
                )
                return mb
            frame = self._receive_frame() if frame is None else frame
            if frame is None:
                mb.error = StageRankError(self._broken)
                return mb
        if frame.seq != entry.seq:  # cannot happen with FIFO ranks; say so loudly if it ever does
            raise RuntimeError(f"stage results out of order: expected micro-batch {entry.seq}, got {frame.seq}")
        if frame.kind == Kind.ERROR:
            mb.error = pickle.loads(frame.data)
            return mb
        mb.stage_ms = [us / 1000.0 for us in frame.stage_us]
        for part, wire in zip(mb.parts, frame.parts):
            part.hidden, part.logits = None, (None if wire.payload is None else wire.payload.clone())
        return mb

    def _receive_frame(self):
        """The next frame from the last rank, or None with the pipeline marked broken (lock held)."""
        last = self.world_size - 1
        try:
            self._receive.wait(datetime.timedelta(seconds=self.timeout_s))
            frame = decode(self._buffers[self._current])
        except RuntimeError as err:
            timed_out = "Timed out" in str(err)
            rank = self._failed_rank(wait_s=0.0 if timed_out else 2.0) or last
            known = self.ranks.describe(rank)
            what = known or (
                f"did not answer within {self.timeout_s:g} s" if timed_out else f"closed its link ({_reason(err)})"
            )
            self._fail(self._name(rank, what), rank)
            return None
        if frame.kind == Kind.FAULT:  # a rank lost its neighbour: frame.seq is the lost rank
            rank = frame.seq if 1 <= frame.seq < self.world_size else (self.ranks.failed_rank() or last)
            self._failed_rank(wait_s=2.0)
            known = self.ranks.describe(rank)
            self._fail(self._name(rank, known or f"is gone ({_reason(frame.data.decode(errors='replace'))})"), rank)
            return None
        self._current ^= 1
        self._receive = self._group.recv([self._buffers[self._current]], last, DATA)
        return frame

    def _failed_rank(self, wait_s: float) -> int | None:
        """A rank known to be gone or stopped; a killed process closes its links a moment before it can be reaped."""
        deadline = time.monotonic() + wait_s
        while (rank := self.ranks.failed_rank()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return rank

    def drain(self) -> list[MicroBatch]:
        return [self.get() for _ in range(self.in_flight)]

    # -- faults ----------------------------------------------------------------------------------
    def _fail(self, message: str, rank: int) -> None:
        """Mark the pipeline broken (lock held); ranks this head started come back in the background."""
        if self._broken is not None:
            return
        self._broken = message
        self._group = None
        if self.ranks.can_restart and not self._closed:
            self._broken = f"{message}; restarting the stage ranks"
            self._restarting = threading.Thread(
                target=self._restart, args=(message,), name="strata-stage-restart", daemon=True
            )
            self._restarting.start()

    def _restart(self, cause: str) -> None:
        self.ranks.stop(timeout_s=1.0)
        try:
            self._start()
        except BaseException as err:
            with self._lock:
                self._broken = f"{cause}; the restart failed: {err}"
            self.ranks.stop(timeout_s=1.0)
            return
        with self._lock:
            if not self._closed:
                self.epoch += 1
                self._broken = None
                return
        self.ranks.stop(timeout_s=1.0)  # closed while restarting: the new ranks must not outlive the head

    def link_bytes(self, rows: int) -> list[int]:
        """Bytes one decode micro-batch of `rows` rows puts on each link: head -> rank 1, rank i -> i+1, last -> head."""
        dtype = getattr(torch, self.specs[0].dtype)
        ids, ones = torch.zeros(rows, dtype=torch.long), torch.ones(rows, dtype=torch.long)

        def frame(payload, times):
            return encode(Kind.WORK, 0, [WirePart(ids, ids, ids, ones, True, payload)], [0] * times).numel()

        hidden = torch.zeros(padded_rows(rows, self.row_tile), self._hidden_size, dtype=dtype)
        logits = torch.zeros(rows, self._vocab_size)
        return (
            [frame(None, 0)]
            + [frame(hidden, i + 1) for i in range(self.num_stages - 1)]
            + [frame(logits, self.num_stages)]
        )

    def health(self) -> str | None:
        """None while every stage rank serves; else what is wrong, naming the rank."""
        return "the pipeline is closed" if self._closed else self._broken

    def close(self, timeout_s: float = 5.0) -> None:
        """SHUTDOWN walks the chain (each rank forwards it and exits), then stragglers are killed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._restarting is not None:
            self._restarting.join(timeout_s)
        if self._group is not None and self._broken is None:
            try:
                self._sender.send(encode(Kind.SHUTDOWN, self._seq))
                self._sender.flush()
            except RuntimeError:
                pass
        self.ranks.stop(timeout_s)
        self._group = None
