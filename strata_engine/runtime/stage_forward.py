"""One stage's forward of one micro-batch part: every stage runtime (threads, processes) calls this.

Contract: `stage_forward(model, layers, cache, part, is_first, is_last, row_tile, device)` runs the part's
ragged rows (prompt chunks and decode rows together) through `layers` as one forward: the first stage
embeds `part.tokens`, a later stage continues from `part.hidden` (each stage first trims its cache); the last stage leaves `part.logits`
[rows, V] (each row's last token) when `part.want_logits`, else `part.hidden` [padded tokens, D] for the
next stage. The flat tokens and the head's rows are padded to a multiple of `row_tile` here, so the
same padding happens in every stage runtime; padding tokens are never cached or attended to.
"""

from __future__ import annotations

import torch

from .invariance import padded_rows
from ..model.kv_cache import KVCache


def _pad(t: torch.Tensor, rows: int) -> torch.Tensor:
    """t: [M, ...] -> [rows, ...] with zeros appended (rows >= M)."""
    extra = rows - t.shape[0]
    return t if extra == 0 else torch.cat([t, t.new_zeros(extra, *t.shape[1:])])


def stage_forward(
    model: torch.nn.Module,
    layers: range,
    cache: KVCache,
    part,
    is_first: bool,
    is_last: bool,
    row_tile: int,
    device: str,
    compiled=None,
) -> None:
    """compiled: the stage's CompiledDecode (runtime/compiled_step.py), which takes decode-only parts."""
    cache.trim(part.rows.rows)  # positions behind a sliding window go back to the OS (model/kv_cache.py)
    if compiled is not None and compiled.run(part):
        return
    rows = part.rows.padded_to(padded_rows(part.rows.real, row_tile))
    positions = _pad(part.positions.to(device), rows.padded)  # padding at position 0: rotary stays finite
    if is_first:
        h = model.embed(_pad(part.tokens.to(device), rows.padded))  # [N, D]
    else:
        h = part.hidden.to(device)
    for i in layers:
        h = model.layers[i](h, positions, cache.layers[i], rows)
    if not is_last:
        part.hidden = h
        return
    part.hidden = None
    if part.want_logits:
        last = h[rows.last_tokens]  # [R, D]: the head's GEMM is padded like every other
        part.logits = model.head(_pad(last, padded_rows(last.shape[0], row_tile)))[: last.shape[0]].float()
    else:
        part.logits = None
