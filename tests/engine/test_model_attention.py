"""The row attention paths and the two MoE dispatch paths agree with plain reference math."""

from __future__ import annotations

import pytest
import torch

from strata_engine.model.attention import attend_row
from strata_engine.model.config import ModelConfig
from strata_engine.model.transformer import MoE

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8


def reference(q, keys, values, positions, window=None):
    """Softmax attention written out: query t sees keys 0..positions[t] (the last `window` of them)."""
    k = keys.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = values.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores = q @ k.transpose(-1, -2) / HEAD_DIM**0.5  # [1, H, T, L]
    key_positions = torch.arange(keys.shape[2])[None, :]
    hidden = key_positions > positions[:, None]
    if window is not None:
        hidden |= key_positions <= positions[:, None] - window
    return scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize(
    "positions, consecutive",
    [
        ([9], False),  # decode: one query over the whole prefix
        (list(range(0, 7)), True),  # first chunk: causal from 0
        (list(range(5, 12)), True),  # later chunk: prefix without mask + chunk causal, merged
        ([3, 5, 6, 11], False),  # anything else: one masked call
    ],
)
def test_attend_row_paths_match_reference(positions, consecutive):
    gen = torch.Generator().manual_seed(len(positions))
    pos = torch.tensor(positions)
    length = positions[-1] + 1
    q = torch.randn(1, HEADS, len(positions), HEAD_DIM, generator=gen)
    keys, values = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen) for _ in range(2))
    torch.testing.assert_close(
        attend_row(q, keys, values, pos, consecutive), reference(q, keys, values, pos), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize(
    "positions, consecutive",
    [
        ([40], False),  # decode past the window: its last W keys
        (list(range(20, 27)), True),  # a chunk past the window: shared keys, band and chunk, each unmasked, merged
        (list(range(13, 16)), True),  # the smallest such chunk start (position W)
        (list(range(13, 25)), True),  # the longest such chunk (W - 1 queries): one key every query sees
        (list(range(9, 16)), True),  # the window starts at key 0 for the first queries: the masked call
        (list(range(20, 40)), True),  # a chunk longer than the window: the masked call
        ([18, 20, 21, 30], False),  # not consecutive: the masked call
    ],
)
def test_windowed_paths_match_reference(positions, consecutive):
    window = 13
    gen = torch.Generator().manual_seed(len(positions) + positions[0])
    pos = torch.tensor(positions)
    length = positions[-1] + 1
    q = torch.randn(1, HEADS, len(positions), HEAD_DIM, generator=gen)
    keys, values = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen) for _ in range(2))
    expected = reference(q, keys, values, pos, window)
    torch.testing.assert_close(attend_row(q, keys, values, pos, consecutive, window), expected, rtol=0, atol=1e-5)
    transposed = q.transpose(1, 2).contiguous().transpose(1, 2)  # [1, H, T, hd] strided as the engine passes it
    torch.testing.assert_close(
        attend_row(transposed, keys, values, pos, consecutive, window), expected, rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("experts, top_k", [(4, 2), (8, 2)])
def test_moe_every_expert_path_equals_routed_path(experts, top_k):
    config = ModelConfig(
        architecture="qwen3_moe",
        vocab_size=16,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=24,
        qk_norm=True,
        moe_layers=(0, 1),
    )
    torch.manual_seed(0)
    moe = MoE(config)
    for param in moe.parameters():
        torch.nn.init.normal_(param, std=0.3)
    x = torch.randn(6, 32)
    with torch.inference_mode():
        _, weights, chosen = moe.route(x)
        dense, routed = moe._every_expert(x, weights, chosen), moe._routed(x, weights, chosen)
        assert moe(x).shape == (6, 32)
    torch.testing.assert_close(dense, routed, rtol=1e-6, atol=1e-5)  # same terms; GEMM shapes differ in rounding
