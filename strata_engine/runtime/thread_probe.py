"""The thread-count claim: a stage's layers give bitwise the same outputs at one thread as at its own count.

Batch invariance (runtime/invariance.py) says a row's bits do not depend on its neighbours *within* an
engine. Whether they also hold *across* layouts (one stage or two, thread stages or stage ranks) is a
separate claim, because a layout changes each stage's thread count (2 cores, 1 stage = 2 threads; 2 stages
= 1 each). Measured on AMD EPYC (AVX-512): MKL's default paths change the decode steps' last bits between
1 and 2 threads; with MKL's conditional numerical reproducibility (`MKL_CBWR`, which `mkl_mode.py` pins to
`AUTO,STRICT` before torch's first GEMM) they do not, and the layouts agree bit for bit. So each stage
probes its own layers here, at start, on a scratch cache: prompt rows, then decode rows, at 1 thread and
at its count; the engine claims `layout_invariant` only where every stage agrees and it claims batch
invariance. ~50 ms a stage on the embedded model (quiet machine).
"""

from __future__ import annotations

from typing import Callable

import torch

from ..model.kv_cache import KVCache
from .invariance import padded_rows
from .stage_forward import stage_forward

PROBE_SLOTS, PROBE_PROMPT, PROBE_STEPS = 2, 20, 2  # the decode steps are where the bits moved


def stage_threads_agree(
    model: torch.nn.Module,
    layers: range,
    row_tile: int,
    threads: int | None,
    device: str,
    is_first: bool,
    is_last: bool,
    ragged: Callable,
) -> bool:
    """True when this stage's prompt and decode outputs are bitwise equal at 1 thread and at `threads`.
    ragged: `Part.ragged` (runtime/pipeline.py), passed in so this module stays below the pipeline."""
    previous = torch.get_num_threads()
    threads = threads or previous
    if threads <= 1:
        return True  # nothing to compare: a stage at one thread is what the claim is measured against
    try:
        runs = []
        for count in (1, threads):
            torch.set_num_threads(count)
            runs.append(_outputs(model, layers, row_tile, device, is_first, is_last, ragged))
        return all(torch.equal(a, b) for a, b in zip(*runs))
    finally:
        torch.set_num_threads(previous)


def _outputs(model, layers, row_tile, device, is_first, is_last, ragged) -> list[torch.Tensor]:
    dtype = next(model.layers[layers[0]].parameters()).dtype
    cache = KVCache(model.config, PROBE_SLOTS + 1, PROBE_PROMPT + PROBE_STEPS + 1, dtype, device, layers=layers)
    generator = torch.Generator().manual_seed(0)
    steps = [
        [(slot, 0, [(slot * 7 + i * 13) % model.config.vocab_size for i in range(PROBE_PROMPT)])]
        for slot in range(PROBE_SLOTS)
    ]
    steps += [
        [(slot, PROBE_PROMPT + step, [(slot + 5 * step) % model.config.vocab_size]) for slot in range(PROBE_SLOTS)]
        for step in range(PROBE_STEPS)
    ]
    out = []
    with torch.inference_mode():
        for rows in steps:
            part = ragged(rows, want_logits=True)
            if not is_first:
                part.hidden = torch.randn(
                    padded_rows(part.tokens.numel(), row_tile), model.config.hidden_size, generator=generator
                ).to(device, dtype)
            stage_forward(model, layers, cache, part, is_first, is_last, row_tile, device)
            out.append(part.logits if is_last else part.hidden)
    return out
