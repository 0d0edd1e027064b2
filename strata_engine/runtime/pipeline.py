"""The pipeline stages, applied to a built model from outside the model file.

The model comes placed by `split_layers` (built_stage.py: each stage's layers on the device of its plan,
stage_plan.py). A `Pipeline` runs one worker thread per stage (thread_stage.py):
micro-batches enter stage 0 and flow stage to stage through queues, so stage 0 can work on one
micro-batch while stage 1 works on the previous one. Only the last stage produces logits. A part is
ragged (`Part.ragged`: prompt chunks and decode rows in one forward); each stage runs it through
`stage_forward`, padded to `row_tile` rows, and `Pipeline.batch_invariant` says whether that makes a
row's logits bitwise independent of the rows beside it here (runtime/invariance.py). With the compiled
step on, where every stage is on the CPU, a micro-batch of decode rows sent into an empty pipeline runs
every layer in one compiled call on the first stage's thread and goes straight to the output (the whole
decode; `MicroBatch.whole` says it did): its bits are the stage-by-stage step's, without the hand-overs.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import torch

from ..model.rows import Rows
from ..runtime_config import RuntimeConfig
from .invariance import apply_row_tile, default_row_tile, invariance_holds
from .compiled_step import compile_info, whole_decode
from .prefix_copies import PrefixCopy
from .thread_probe import stage_threads_agree
from .thread_stage import Stage
from .built_stage import BuiltStage
from .stage_plan import StagePlan


@dataclass(eq=False)
class Part:
    """Ragged rows run as one forward: any mix of prompt chunks and decode rows, rows back to back."""

    tokens: torch.Tensor  # [N] int64, the rows' tokens back to back
    positions: torch.Tensor  # [N] int64
    rows: Rows  # host-side: each row's slot, span in the flat tokens and positions
    want_logits: bool  # last stage computes logits of each row's last token
    hidden: torch.Tensor | None = None  # [N rounded up to the row tile, D] between stages
    logits: torch.Tensor | None = None  # [rows, V] float32 after the last stage

    @classmethod
    def ragged(cls, rows: Sequence[tuple[int, int, Sequence[int]]], want_logits: bool) -> "Part":
        """rows: (slot, first position, token ids) each; the tokens sit at consecutive positions."""
        tokens = [t for _, _, ids in rows for t in ids]
        positions = [[first + i for i in range(len(ids))] for _, first, ids in rows]
        layout = Rows.of([slot for slot, _, _ in rows], positions)
        return cls(
            torch.tensor(tokens, dtype=torch.long),
            torch.tensor([p for row in positions for p in row], dtype=torch.long),
            layout,
            want_logits,
        )

    @classmethod
    def uniform(cls, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, want_logits: bool) -> "Part":
        """tokens, positions: [B, T]; slots: [B] (rows of equal length)."""
        layout = Rows.of(slots.tolist(), positions.tolist())
        return cls(tokens.reshape(-1), positions.reshape(-1), layout, want_logits)


@dataclass(eq=False)
class MicroBatch:
    parts: list[Part]
    tag: Any = None  # the caller's bookkeeping (which group / chunk)
    copy: PrefixCopy | None = None  # instead of parts: the prompt cache's copy, done by each stage on its layers
    error: BaseException | None = None
    stage_ms: list[float] = field(default_factory=list)
    whole: bool = False  # the pipeline's choice: decode rows through every stage's layers in one compiled call


class Pipeline:
    """Stage workers joined by queues; `submit` feeds stage 0, `get` returns finished micro-batches in order."""

    def __init__(
        self,
        model: torch.nn.Module,
        stages: Sequence[StagePlan],
        num_slots: int,
        ctx: int,
        dtype: torch.dtype,
        runtime: RuntimeConfig = RuntimeConfig(),
        kv_dtype: str | None = None,
    ):
        """runtime: the torch runtime's knobs (runtime_config.py): its row tile pads every GEMM's rows to a multiple
        of it (None: the model's tile on CPU in float32, else 1; 1 = padding off, no invariance claim); with
        `compile`, decode-only micro-batches go through each stage's compiled step, compiled here (the warm-up), its
        GEMMs `gemms` (runtime/compiled_step.py); `decode_all_threads`: decode parts at the stages' full thread count.
        kv_dtype: the KV cache's format (model/kv_format.py; None: the model's dtype)."""
        self.stages = list(stages)
        threads = runtime.threads
        if runtime.row_tile is None:
            runtime = replace(runtime, row_tile=default_row_tile(model.config, stages[0].device, dtype, threads))
        self.runtime = runtime  # as built: the row tile resolved
        self.row_tile, self.threads = runtime.row_tile, threads
        devices = {plan.device for plan in stages}
        # what /v1/engine claims: every stage pads, and the GEMM probe passes at the stages' thread count
        self.batch_invariant = all(invariance_holds(model.config, d, dtype, self.row_tile, threads) for d in devices)
        apply_row_tile(model, self.row_tile)
        # and across layouts: no stage's bits move with its thread count (runtime/thread_probe.py); the compiled
        # step's kernels differ from the eager forward's in the last bits, so a compiled engine does not claim it
        self.layout_invariant = (
            self.batch_invariant
            and not runtime.compile
            and all(
                stage_threads_agree(
                    model, plan.layers, self.row_tile, threads, plan.device, i == 0, i == len(stages) - 1, Part.ragged
                )
                for i, plan in enumerate(stages)
            )
        )
        queues = [queue.Queue() for _ in range(len(stages) + 1)]
        self._inbox, self._done = queues[0], queues[-1]
        built_stages = [
            BuiltStage.build(model, plan, i == 0, i == len(stages) - 1, num_slots, ctx, dtype, runtime, kv_dtype)
            for i, plan in enumerate(stages)
        ]
        self.caches = [b.cache for b in built_stages]
        compiled = [b.compiled for b in built_stages]
        # The whole decode: where every stage is on one CPU, a decode micro-batch sent into an empty pipeline runs
        # every layer in one compiled call on the first stage's thread, with no hand-over between stages (which
        # costs more than the rows on a 2-core machine: docs/measurements/whole-decode.md). Its graphs are one
        # more warm-up.
        whole = None
        if runtime.compile and len(stages) > 1 and all(plan.device == "cpu" for plan in stages):
            whole = whole_decode(model, stages, self.caches, num_slots, runtime)
        self._whole = whole
        built = ((c.graphs, c.compile_s) for c in [*compiled, whole] if c is not None)
        self.compile_info = compile_info(built, runtime.gemms)
        # Decode rows at one thread: a decode step's GEMMs are 16 rows, too small to split, and OpenMP's second
        # thread cost more than it bought (docs/measurements/decode-step.md); prompt chunks keep
        # every thread. Only where the stage's bits are the same at 1 thread and at its count (the probe above).
        decode_threads = 1 if self.layout_invariant and (threads or 1) > 1 and not runtime.decode_all_threads else None
        self._workers = [
            Stage(
                plan,
                model,
                cache,
                queues[i],
                queues[i + 1],
                i == 0,
                i == len(stages) - 1,
                threads,
                self.row_tile,
                c,
                decode_threads,
                *((whole, self._done) if i == 0 else ()),
            )
            for i, (plan, cache, c) in enumerate(zip(stages, self.caches, compiled))
        ]
        for worker in self._workers:
            worker.start()
        self.in_flight = 0

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def submit(self, mb: MicroBatch) -> None:
        # Only into an empty pipeline: no later stage holds an earlier micro-batch this one could overtake,
        # nor touches the layers it writes.
        mb.whole = self._whole is not None and self.in_flight == 0 and mb.copy is None and len(mb.parts) == 1
        self.in_flight += 1
        self._inbox.put(mb)

    def get(self) -> MicroBatch:
        mb = self._done.get()
        self.in_flight -= 1
        return mb

    def drain(self) -> list[MicroBatch]:
        return [self.get() for _ in range(self.in_flight)]

    def close(self) -> None:
        # a None travels through every stage in turn: each worker stops after forwarding work ahead of it
        self._inbox.put(None)
        for i, worker in enumerate(self._workers):
            worker.join(timeout=5)
            if i + 1 < len(self._workers):
                self._workers[i + 1].inbox.put(None)
        for cache in self.caches:
            cache.free()
