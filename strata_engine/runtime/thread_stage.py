"""One pipeline stage as a worker thread: micro-batches (runtime/pipeline.py) in from the stage before, out to the next.

Contract: `Stage(plan, model, cache, inbox, outbox, ...)` runs, on its own thread, each micro-batch's prefix copy
(the prompt cache's, on its layers) and parts through its layers by `stage_forward` (decode-only parts through its
compiled step where it has one, or at `decode_threads`), and puts it in the outbox; an exception fails that
micro-batch alone. A None in the inbox stops it. The first stage may hold the whole decode: a micro-batch of decode
rows marked `whole` runs every layer in one compiled call there and goes straight to the pipeline's output.
"""

from __future__ import annotations

import queue
import threading
import time

import torch

from ..model.kv_cache import KVCache
from .prefix_copies import HostPrefixes
from .stage_forward import stage_forward
from .stage_plan import StagePlan


class Stage(threading.Thread):
    def __init__(
        self,
        plan: StagePlan,
        model: torch.nn.Module,
        cache: KVCache,
        inbox: queue.Queue,
        outbox: queue.Queue,
        is_first: bool,
        is_last: bool,
        threads: int | None,
        row_tile: int,
        compiled=None,
        decode_threads: int | None = None,
        whole=None,
        done: queue.Queue | None = None,
    ):
        super().__init__(name=f"strata-stage-{plan.index}", daemon=True)
        self.plan, self.model, self.cache = plan, model, cache
        self.inbox, self.outbox = inbox, outbox
        self.is_first, self.is_last, self.threads, self.row_tile = is_first, is_last, threads, row_tile
        self.compiled = compiled  # CompiledDecode: decode-only parts through the compiled step
        self.decode_threads = decode_threads  # parts of decode rows only at this many threads (None: `threads`)
        self.prefixes = HostPrefixes(cache)  # this stage's layers of the prompt cache's host store
        self.whole, self.done = whole, done  # the first stage's CompiledDecode over every layer, and the last queue

    def run(self) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)
        with torch.inference_mode():
            while True:
                mb = self.inbox.get()
                if mb is None:
                    return
                if mb.whole and mb.error is None and self.whole is not None and self._run_whole(mb):
                    self.done.put(mb)  # every layer ran here: straight to the pipeline's output
                    continue
                if mb.error is None:
                    t0 = time.perf_counter()
                    try:
                        if mb.copy is not None:
                            self.prefixes.apply(mb.copy)
                        for part in mb.parts:
                            self._run_part(part)
                    except BaseException as exc:  # one micro-batch fails, the stage keeps serving
                        mb.error = exc
                    mb.stage_ms.append((time.perf_counter() - t0) * 1000.0)
                self.outbox.put(mb)

    def _run_whole(self, mb) -> bool:
        """The micro-batch through every layer in one compiled call, if it is decode rows only; else False."""
        t0 = time.perf_counter()
        try:
            self.whole.cache.trim(mb.parts[0].rows.rows)
            if not self.whole.run(mb.parts[0]):
                mb.whole = False  # not decode rows only: stage by stage
                return False
        except BaseException as exc:
            mb.error = exc
        mb.stage_ms.append((time.perf_counter() - t0) * 1000.0)
        return True

    def _run_part(self, part) -> None:
        # a decode-only part (a token a row) runs at decode_threads, eager; ~50 us a switch, bits equal (thread probe)
        switch = bool(self.decode_threads and self.threads and part.rows.real == len(part.rows.rows))
        if switch:
            torch.set_num_threads(self.decode_threads)
        try:
            stage_forward(
                self.model,
                self.plan.layers,
                self.cache,
                part,
                self.is_first,
                self.is_last,
                self.row_tile,
                self.plan.device,
                None if switch else self.compiled,
            )
        finally:
            if switch:
                torch.set_num_threads(self.threads)
