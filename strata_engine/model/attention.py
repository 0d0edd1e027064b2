"""Attention of one cache row: the queries of one slot against that slot's own cached prefix.

`attend_row(q, keys, values, positions)` computes causal attention for queries at `positions` over keys
0..positions[-1] of the row and nothing else, so what other rows of a call hold cannot reach it. Four
exact-math paths, chosen by shape only (never by batch composition):
  - one query (decode): plain attention over the whole prefix, no mask;
  - consecutive positions (a prompt chunk) where the caller passes a `chunk` hook and it answers: one call
    of it, with or without the window (the model's `Attention.chunk_attention`: None unless the runtime
    set its native op there); the paths below serve otherwise and are its measure in
    benchmarks/bench_attention.py;
  - consecutive positions on CPU in float32 (a prompt chunk): the cached prefix before the chunk (no mask)
    and the chunk itself (causal) as two flash calls, merged by their log-sum-exps; the masked single
    call is ~25% slower on CPU and needs a [T, L] mask built per row;
  - anything else: one call with an additive mask.
With a sliding window W (`window`), a query at position p sees keys (p - W, p] only, as transformers'
sliding-window mask does: decode slices its last W keys. A chunk of T < W consecutive queries at p..p+T-1
past the window (on CPU, float32) needs no mask either: the keys every query sees, [p+T-W, p), go in one
flash call; the chunk itself is causal; and the band [p-W+1, p+T-W), where query i sees key j of the band
iff j >= i, is causal too once queries and keys are both reversed. The three parts merge by their
log-sum-exps, as the prefix and chunk do above. The masked call over every key the chunk sees is a little
slower and builds a [T, T+W-1] mask per row (benchmarks/bench_attention.py's section 2; docs/measurements/decode-step.md,
"Decisions earlier runs made"). Any other windowed shape takes that masked call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# ATen's CPU flash kernel with its log-sum-exp (None on a torch without it): what the windowed paths merge.
flash_cpu = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend_row(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    positions: torch.Tensor,
    consecutive: bool,
    window: int | None = None,
    chunk: Callable | None = None,
) -> torch.Tensor:
    """q: [1, H, T, hd] at positions [T]; keys, values: [1, Hkv, L, hd] with L = positions[-1] + 1 -> [1, H, T, hd].
    `chunk(q, keys, values, window)` answers a prompt chunk's queries, or returns None; then, or without a
    hook, ATen's calls answer (the flash paths)."""
    if chunk is not None and consecutive and q.shape[2] > 1:
        out = chunk(q, keys, values, window)
        if out is not None:
            return out
    tokens, length = q.shape[2], keys.shape[2]
    if window is not None and length > window:
        return _windowed(q, keys, values, positions, window, consecutive)
    if tokens == 1:
        return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    start = length - tokens
    if consecutive and start == 0:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
    if consecutive and flash_cpu is not None and q.device.type == "cpu" and q.dtype == torch.float32:
        return _prefix_then_chunk(q, keys, values, start)
    seen = torch.arange(length, device=q.device)[None, :] <= positions[:, None]  # [T, L]
    mask = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def cached_row(
    q: torch.Tensor, positions: torch.Tensor, kv, row, window: int | None, chunk: Callable | None, codec=None
):
    """One row's queries q [T, H, hd] at positions [T] over its slot's cache (model/kv_cache.LayerKV, `row` a
    model/rows.Row) -> [T, H, hd]: `kv.read` from position `low` (0 where reads are views; a quantized or bf16
    format dequantizes only what the window lets the row see, and the positions shift to match; `codec`: the
    read's), then attend_row, `chunk` taking float32 keys either way."""
    low = kv.first_read(row.first)
    keys, values = kv.read(row.slot, low, row.last + 1, codec)
    shifted = positions - low if low else positions
    o = attend_row(
        q.transpose(0, 1)[None], keys.to(q.dtype), values.to(q.dtype), shifted, row.consecutive, window, chunk
    )
    return o[0].transpose(0, 1)


def decode_span(row, window: int | None) -> tuple[int, int, int]:
    """A one-query row's (slot, low, high): the keys [low, high) its query at row.last sees, as attend_row's
    one-query path slices them (the last `window` positions)."""
    high = row.last + 1
    return row.slot, max(0, high - window) if window else 0, high


def _windowed(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, window: int, consecutive: bool
) -> torch.Tensor:
    """Sliding-window attention: the query at position p sees keys (p - window, p]."""
    tokens, length = q.shape[2], keys.shape[2]
    low = max(0, int(positions[0]) - window + 1) if tokens > 1 else length - window  # the first key any query sees
    if (
        consecutive
        and 1 < tokens < window
        and low > 0
        and flash_cpu is not None
        and q.device.type == "cpu"
        and q.dtype == torch.float32
    ):
        return band_window_chunk(q, keys, values, length - tokens, window)
    keys, values = keys[:, :, low:], values[:, :, low:]
    if tokens == 1:
        return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    key_positions = torch.arange(low, length, device=q.device)[None, :]  # [1, L']
    seen = (key_positions <= positions[:, None]) & (key_positions > positions[:, None] - window)  # [T, L']
    mask = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def band_window_chunk(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, window: int
) -> torch.Tensor:
    """T consecutive queries at start..start+T-1 (1 < T < window, start >= window): the shared keys, the
    band and the chunk, each a flash call without a mask, merged (module docstring)."""
    _, heads, tokens, head_dim = q.shape
    group = heads // keys.shape[1]
    shared, band = start + tokens - window, start - window + 1  # [shared, start): every query; [band, shared): the band
    parts = _unmasked_then_chunk(q, keys, values, shared, start)
    # The band's T-1 keys, reversed, against queries T-2..0 (the last query sees none of it): causal.
    band_keys = keys[:, :, band:shared].flip(2).repeat_interleave(group, dim=1)
    band_values = values[:, :, band:shared].flip(2).repeat_interleave(group, dim=1)
    out_band, lse_band = flash_cpu(q[:, :, : tokens - 1].flip(2), band_keys, band_values, 0.0, True)[:2]
    parts.append(
        (
            torch.cat([out_band.flip(2), out_band.new_zeros(1, heads, 1, head_dim)], dim=2),
            torch.cat([lse_band.flip(2), lse_band.new_full((1, heads, 1), float("-inf"))], dim=2),
        )
    )
    return _merge(parts)


def _prefix_then_chunk(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int) -> torch.Tensor:
    """Queries at start..start+T-1: every query sees the whole prefix [0, start) and the chunk causally."""
    return _merge(_unmasked_then_chunk(q, keys, values, 0, start))


def _unmasked_then_chunk(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, low: int, start: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(out, lse) of the keys [low, start) that every query sees, then of the chunk [start, ...) causally."""
    _, heads, tokens, head_dim = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    # Those keys need no mask, so the query heads sharing a kv head fold into one long query block.
    folded = q.reshape(1, kv_heads, group * tokens, head_dim)
    out, lse = flash_cpu(folded, keys[:, :, low:start], values[:, :, low:start], 0.0, False)[:2]
    chunk_keys = keys[:, :, start:].repeat_interleave(group, dim=1)  # [1, H, T, hd]: a small copy
    chunk_values = values[:, :, start:].repeat_interleave(group, dim=1)
    return [
        (out.reshape(1, heads, tokens, head_dim), lse.reshape(1, heads, tokens)),
        flash_cpu(q, chunk_keys, chunk_values, 0.0, True)[:2],
    ]


def _merge(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Softmax over the union of key sets = each part's softmax weighted by its share of the total exp-sum."""
    top = parts[0][1]
    for _, lse in parts[1:]:
        top = torch.maximum(top, lse)
    shares = [(lse - top).exp_() for _, lse in parts]
    total = sum(shares[1:], shares[0])
    out = parts[0][0] * (shares[0] / total)[..., None]
    for (o, _), share in zip(parts[1:], shares[1:]):
        out.add_(o * (share / total)[..., None])
    return out
