"""The native ops built at every x86-64 level this CPU runs (g++ -march=x86-64-v2, v3, v4), each checked
against the ATen path it stands in for on small shapes (the kv codec bit for bit), and the levels with FMA
(v3, v4) against each other bit for bit. Slow: each level is a build of its own (~40-70 s once per machine, then torch's cache)."""

from __future__ import annotations

import platform

import pytest
import torch

from strata_bench.provenance import cpu_flags
from strata_engine.model.attention import attend_row
from strata_engine.model.kv_cache import LayerKV
from strata_engine.runtime.native import (
    chunk_attention,
    decode_attention,
    decode_experts,
    kv_codec,
    quant_decode_attention,
)
from strata_engine.runtime import step_ops

from helpers import native_op_or_skip

pytestmark = pytest.mark.slow

LEVELS = {"x86-64-v2": {"sse4_2"}, "x86-64-v3": {"avx2", "fma"}, "x86-64-v4": {"avx512f", "avx512bw", "avx512vl"}}


def _runnable() -> list[str]:
    if platform.machine() != "x86_64":
        return []
    flags = set(cpu_flags())
    return [level for level, needs in LEVELS.items() if needs <= flags]


def _op(getter, level: str):
    if level not in _runnable():
        pytest.skip(f"this CPU cannot run {level} code")
    return native_op_or_skip(getter, "op", march=level)


def _chunk(tokens: int, start: int, dim: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, 8, dim, generator=g)
    keys, values = (torch.randn(4, start + tokens, dim, generator=g) for _ in range(2))
    return q, keys, values


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("tokens,start,dim,window", [(64, 1100, 32, 1024), (37, 0, 64, -1), (9, 30, 128, 16)])
def test_the_chunk_op_at_each_level_equals_the_flash_paths(level, tokens, start, dim, window):
    op = _op(chunk_attention.native_chunk_attention, level)
    q, keys, values = _chunk(tokens, start, dim, seed=tokens + dim)
    got = op(q, keys, values, start, window)
    want = attend_row(
        q.transpose(0, 1)[None],
        keys[None],
        values[None],
        torch.arange(start, start + tokens),
        True,
        None if window < 0 else window,
    )[0].transpose(0, 1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("level", list(LEVELS))
def test_the_decode_op_at_each_level_equals_the_aten_op(level):
    op = _op(decode_attention.native_decode_attention, level)
    g = torch.Generator().manual_seed(7)
    caches = [torch.randn(4, 4, 1600, 32, generator=g) for _ in range(2)]
    q, k, v = (torch.randn(4, h, 32, generator=g) for h in (8, 4, 4))
    slots, at = torch.tensor([2, 0, 3, -1]), torch.tensor([5, 700, 1500, 0])
    want = step_ops.decode_attention(q, k, v, caches[0].clone(), caches[1].clone(), slots, at, 1024, native=False)
    torch.testing.assert_close(
        op(q, k, v, caches[0].clone(), caches[1].clone(), slots, at, 1024), want, rtol=1e-5, atol=1e-6
    )


def _experts_inputs(layout: str):
    g = torch.Generator().manual_seed(11)
    gate_up, down = torch.randn(8, 256, 256, generator=g) * 0.1, torch.randn(8, 256, 128, generator=g) * 0.1
    if layout == "columns":  # the engine's GEMM weight layout
        gate_up, down = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (gate_up, down))
    x = torch.randn(6, 256, generator=g)
    experts = torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(6)])
    return x, torch.rand(6, 2, generator=g), experts, gate_up, down, torch.tensor([0, 1, 2, 3, 4, -1])


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_the_decode_experts_at_each_level_equal_the_every_expert_path(level, layout):
    op = _op(decode_experts.native_decode_experts, level)
    x, weights, experts, gate_up, down, slots = _experts_inputs(layout)
    dense = torch.zeros(6, 8).scatter_(1, experts, weights) * (slots >= 0)[:, None]
    h = torch.einsum("nd,eid->nei", x, gate_up)
    want = torch.einsum("nei,edi,ne->nd", torch.nn.functional.silu(h[..., :128]) * h[..., 128:], down, dense)
    torch.testing.assert_close(op(x, weights, experts, gate_up, down, slots), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_the_levels_with_fma_give_the_decode_experts_the_same_bits(layout):
    levels = [level for level in ("x86-64-v3", "x86-64-v4") if level in _runnable()]
    if len(levels) < 2:
        pytest.skip(f"this CPU runs {', '.join(levels) or 'neither'} of x86-64-v3 and v4: nothing to compare")
    outs = [_op(decode_experts.native_decode_experts, level)(*_experts_inputs(layout)) for level in levels]
    assert torch.equal(outs[0], outs[1])


def test_the_levels_with_fma_give_the_same_bits():
    levels = [level for level in ("x86-64-v3", "x86-64-v4") if level in _runnable()]
    if len(levels) < 2:
        pytest.skip(f"this CPU runs {', '.join(levels) or 'neither'} of x86-64-v3 and v4: nothing to compare")
    q, keys, values = _chunk(100, 2000, 32, seed=3)
    outs = [_op(chunk_attention.native_chunk_attention, level)(q, keys, values, 2000, 1024) for level in levels]
    assert torch.equal(outs[0], outs[1])


def test_the_native_level_gives_the_bits_of_its_x86_64_level():
    """The engine's own build (-march=native) and the level it runs at compute every lane alike."""
    level = "x86-64-v4" if "x86-64-v4" in _runnable() else "x86-64-v3"
    if level not in _runnable():
        pytest.skip("neither x86-64-v3 nor v4 runs here")
    native = chunk_attention.native_chunk_attention(march="native")
    if native is None:
        pytest.skip("the op did not build here")
    q, keys, values = _chunk(100, 2000, 32, seed=4)
    assert torch.equal(
        native(q, keys, values, 2000, 1024),
        _op(chunk_attention.native_chunk_attention, level)(q, keys, values, 2000, 1024),
    )


def test_the_levels_with_fma_give_q8_decode_rows_the_same_bits():
    """docs/SERVER.md: v3 and v4 compute the same bits, but the k8v4 values (a few ulps apart). The q8 rows did
    not while the softmax's exp was inlined into this op at v3."""
    levels = [level for level in ("x86-64-v3", "x86-64-v4") if level in _runnable()]
    if len(levels) < 2:
        pytest.skip(f"this CPU runs {', '.join(levels) or 'neither'} of x86-64-v3 and v4: nothing to compare")
    kv = LayerKV(4, 4, 700, 32, torch.float32, "cpu", None, "q8")
    g = torch.Generator().manual_seed(5)
    highs = [601, 604, 637, 650]
    for slot, high in enumerate(highs):
        kv.write_row(slot, 0, *(torch.randn(high, 4, 32, generator=g) for _ in "kv"))
    q, k, v = (torch.randn(4, h, 32, generator=g) for h in (8, 4, 4))
    parts = kv.parts
    args = (*(parts[n] for n in ("k", "k_scale", "v", "v_scale")), torch.empty(0), [0, 1, 2, 3], [0] * 4, highs)
    outs = [_op(quant_decode_attention.native_quant_decode_attention, level)(q, k, v, *args) for level in levels]
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_the_quantized_decode_op_at_each_level_is_float64_math(level, fmt):
    op = _op(quant_decode_attention.native_quant_decode_attention, level)
    kv = LayerKV(3, 4, 300, 32, torch.float32, "cpu", None, fmt)
    g = torch.Generator().manual_seed(8)
    for slot in range(3):
        kv.write_row(slot, 0, *(torch.randn(300, 4, 32, generator=g) for _ in "kv"))
    q, k, v = (torch.randn(3, h, 32, generator=g) for h in (8, 4, 4))
    parts, spans = kv.parts, [(2, 10, 200), (0, 0, 1), (1, 37, 300)]
    slots, lows, highs = (list(column) for column in zip(*spans))
    got = op(
        q,
        k,
        v,
        *(parts[n] for n in ("k", "k_scale", "v", "v_scale")),
        parts.get("v_min", torch.empty(0)),
        slots,
        lows,
        highs,
    )
    for i, (slot, low, high) in enumerate(spans):
        keys, values = (t[0].double().repeat_interleave(2, dim=0) for t in kv.read(slot, low, high))
        weights = torch.softmax(q[i].double()[:, None] @ keys.transpose(1, 2) / 32**0.5, dim=-1)
        assert (got[i].double() - (weights @ values)[:, 0]).abs().max() <= 1e-6 * values.abs().max()


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_the_kv_codec_at_each_level_is_the_python_codec_bit_for_bit(level, fmt):
    encode, decode = _op(kv_codec.native_kv_codec, level)
    ours, theirs = (LayerKV(2, 4, 300, 64, torch.float32, "cpu", None, fmt) for _ in "ab")
    g = torch.Generator().manual_seed(9)
    k, v = (torch.randn(200, 4, 64, generator=g) * 5 for _ in "kv")
    k[3, 1], v[4, 2] = 0.0, 1.5  # a zero scale each
    encode(
        k, v, *(ours.parts[n] for n in ("k", "k_scale", "v", "v_scale")), ours.parts.get("v_min", torch.empty(0)), 1, 50
    )
    theirs.write_row(1, 50, k, v)
    assert all(torch.equal(ours.parts[n], theirs.parts[n]) for n in ours.parts)
    got = decode(
        *(ours.parts[n] for n in ("k", "k_scale", "v", "v_scale")), ours.parts.get("v_min", torch.empty(0)), 1, 20, 260
    )
    assert all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(got, theirs.read(1, 20, 260)))
