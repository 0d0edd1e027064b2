"""Attention of one cache row: the queries of one slot against that slot's own cached prefix.

`attend_row(q, keys, values, positions)` computes causal attention for queries at `positions` over keys
0..positions[-1] of the row and nothing else, so what other rows of a call hold cannot reach it. Three
exact-math paths, chosen by shape only (never by batch composition):
  - one query (decode): plain attention over the whole prefix, no mask;
  - consecutive positions on CPU in float32 (a prompt chunk): the cached prefix before the chunk (no mask)
    and the chunk itself (causal) as two flash calls, merged by their log-sum-exps; the masked single
    call is ~25% slower on CPU and needs a [T, L] mask built per row;
  - anything else: one call with an additive mask.
With a sliding window W (`window`), a query at position p sees keys (p - W, p] only, as transformers'
sliding-window mask does: decode slices its last W keys; a chunk whose window starts past key 0 takes
the masked call over the keys its queries can see.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

_flash_cpu = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend_row(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, consecutive: bool,
               window: int | None = None) -> torch.Tensor:
    """q: [1, H, T, hd] at positions [T]; keys, values: [1, Hkv, L, hd] with L = positions[-1] + 1 -> [1, H, T, hd]."""
    tokens, length = q.shape[2], keys.shape[2]
    if window is not None and length > window:
        return _windowed(q, keys, values, positions, window)
    if tokens == 1:
        return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    start = length - tokens
    if consecutive and start == 0:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
    if consecutive and _flash_cpu is not None and q.device.type == "cpu" and q.dtype == torch.float32:
        return _prefix_then_chunk(q, keys, values, start)
    seen = torch.arange(length, device=q.device)[None, :] <= positions[:, None]  # [T, L]
    mask = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def _windowed(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, window: int) -> torch.Tensor:
    """Sliding-window attention: the query at position p sees keys (p - window, p]."""
    tokens, length = q.shape[2], keys.shape[2]
    low = max(0, int(positions[0]) - window + 1) if tokens > 1 else length - window  # the first key any query sees
    keys, values = keys[:, :, low:], values[:, :, low:]
    if tokens == 1:
        return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    key_positions = torch.arange(low, length, device=q.device)[None, :]  # [1, L']
    seen = (key_positions <= positions[:, None]) & (key_positions > positions[:, None] - window)  # [T, L']
    mask = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def _prefix_then_chunk(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int) -> torch.Tensor:
    """Queries at start..start+T-1: every query sees the whole prefix [0, start) and the chunk causally."""
    _, heads, tokens, head_dim = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    # The prefix needs no mask, so the query heads sharing a kv head fold into one long query block.
    folded = q.reshape(1, kv_heads, group * tokens, head_dim)
    out_prefix, lse_prefix = _flash_cpu(folded, keys[:, :, :start], values[:, :, :start], 0.0, False)[:2]
    out_prefix = out_prefix.reshape(1, heads, tokens, head_dim)
    lse_prefix = lse_prefix.reshape(1, heads, tokens)
    chunk_keys = keys[:, :, start:].repeat_interleave(group, dim=1)  # [1, H, T, hd]: a small copy
    chunk_values = values[:, :, start:].repeat_interleave(group, dim=1)
    out_chunk, lse_chunk = _flash_cpu(q, chunk_keys, chunk_values, 0.0, True)[:2]
    # softmax over the union = each part's softmax weighted by its share of the total exp-sum
    top = torch.maximum(lse_prefix, lse_chunk)
    w_prefix, w_chunk = (lse_prefix - top).exp_(), (lse_chunk - top).exp_()
    total = w_prefix + w_chunk
    return (out_prefix * (w_prefix / total)[..., None]).add_(out_chunk * (w_chunk / total)[..., None])
