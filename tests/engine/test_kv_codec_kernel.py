"""The native codec of a quantized KV cache (runtime/native/kv_codec.py): its stored bytes are kv_format.py's
encode's and its float32 copies its decode's, bit for bit, q8 and k8v4, edge rows and all; the model's rows
go through it and keep their logits. Built once per machine (~30 s); the tests skip where it cannot be.
"""

from __future__ import annotations

import pytest
import torch

from strata_engine.model import load_model
from strata_engine.model.kv_cache import KVCache, LayerKV
from strata_engine.model.kv_format import unpack_nibbles
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile
from strata_engine.runtime.native import kv_codec
from strata_engine.runtime.native.choice import install
from strata_engine.runtime.pipeline import Part
from strata_engine.runtime.stage_forward import stage_forward

from helpers import native_op_fixtures

KV_HEADS, CTX = 3, 160


the_op_serves, native = native_op_fixtures(kv_codec.ENV, kv_codec.native_kv_codec, "kv codec")


def _rows(tokens: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [tokens, Hkv, dim] with edge heads: all zeros (scale 0), all equal, all negative, a
    single non-zero, halves exactly between two levels, subnormals; the rest random of mixed magnitudes."""
    g = torch.Generator().manual_seed(seed)
    k, v = (
        torch.randn(tokens, KV_HEADS, dim, generator=g) * torch.rand(tokens, KV_HEADS, 1, generator=g) * 8 for _ in "kv"
    )
    edges = [
        torch.zeros(dim),
        torch.full((dim,), 1.5),
        -torch.rand(dim, generator=g) - 0.25,
        torch.zeros(dim).index_fill_(0, torch.tensor([dim - 1]), -3.0),
        torch.arange(dim, dtype=torch.float32) % 4 * 0.5 - 0.75,  # x / scale and (x - min) / scale on .5s
        torch.randn(dim, generator=g) * 1e-41,  # a subnormal scale: x / scale past the clamp
    ]
    for i, edge in enumerate(edges[: tokens * KV_HEADS]):
        t, h = divmod(i, KV_HEADS)
        k[t, h], v[t, (h + 1) % KV_HEADS] = edge, edge
    return k, v


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    as_int = {1: torch.uint8, 4: torch.int32}[a.element_size()]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(as_int), b.view(as_int))


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
@pytest.mark.parametrize("dim", [32, 64, 128])
@pytest.mark.parametrize("tokens", [1, 5, 37])
def test_its_stored_bytes_are_the_python_encodes(native, fmt, dim, tokens):
    ours, theirs = (LayerKV(3, KV_HEADS, CTX, dim, torch.float32, "cpu", None, fmt) for _ in "ab")
    for slot, first in ((2, 0), (0, 100), (1, CTX - tokens)):  # the slot's first, a middle and its last positions
        k, v = _rows(tokens, dim, seed=slot + dim + tokens)
        assert kv_codec.write(ours, slot, first, k, v)
        theirs.write_row(slot, first, k, v)
    for name in ours.parts:
        assert _same_bits(ours.parts[name], theirs.parts[name]), f"kv {fmt}, hd {dim}, T {tokens}: {name}"


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_keys_and_values_of_a_projection_slice_are_stored_as_a_copy_of_them(native, fmt):
    """The model hands write_row views of its fused projection [T, H + 2 Hkv, hd]: strided heads and tokens."""
    qkv = torch.randn(20, 7 + 2 * KV_HEADS, 64, generator=torch.Generator().manual_seed(3)) * 4
    k, v = qkv[:, 7 : 7 + KV_HEADS], qkv[:, 7 + KV_HEADS :]
    ours, theirs = (LayerKV(1, KV_HEADS, 64, 64, torch.float32, "cpu", None, fmt) for _ in "ab")
    assert kv_codec.write(ours, 0, 9, k, v)
    theirs.write_row(0, 9, k.contiguous(), v.contiguous())
    assert all(_same_bits(ours.parts[name], theirs.parts[name]) for name in ours.parts)


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
@pytest.mark.parametrize("dim", [32, 64, 128])
def test_its_float32_copies_are_the_python_decodes(native, fmt, dim):
    kv = LayerKV(3, KV_HEADS, CTX, dim, torch.float32, "cpu", None, fmt)
    for slot in range(3):
        kv.write_row(slot, 0, *_rows(CTX, dim, seed=slot))
    for slot, low, high in ((0, 0, CTX), (1, 37, 38), (2, 5, 101), (1, 100, 100), (0, CTX - 1, CTX)):
        got = kv_codec.read(kv, slot, low, high)
        want = kv.read(slot, low, high)
        assert got is not None and got[0].is_contiguous() and got[1].is_contiguous()
        for a, b, what in zip(got, want, "kv"):
            assert _same_bits(a, b), f"kv {fmt}, hd {dim}, slot {slot} [{low}, {high}): {what}"


def test_a_4_bit_value_is_its_product_rounded_then_its_sum_rounded(native):
    """q * scale + min as torch computes it, two roundings, on values where one rounding (an FMA's) differs."""
    kv = LayerKV(1, 1, 2048, 32, torch.float32, "cpu", None, "k8v4")
    g = torch.Generator().manual_seed(11)
    kv.write_row(0, 0, *(torch.randn(2048, 1, 32, generator=g) * 1e3 + 7.3 for _ in "kv"))
    levels = unpack_nibbles(kv.parts["v"][0, 0]).double()
    one_rounding = (levels * kv.parts["v_scale"][0, 0, :, None] + kv.parts["v_min"][0, 0, :, None]).float()
    python = kv.read(0, 0, 2048)[1][0, 0]
    assert not torch.equal(one_rounding, python)  # the data tells the two apart
    assert _same_bits(kv_codec.read(kv, 0, 0, 2048)[1][0, 0], python)


def test_the_switch_turns_it_off_and_other_formats_and_scattered_positions_stay_python(native, monkeypatch):
    k, v = _rows(4, 32, seed=1)
    for fmt in ("f32", "bf16", None):
        assert not kv_codec.write(LayerKV(1, KV_HEADS, 8, 32, torch.float32, "cpu", None, fmt), 0, 0, k, v)
    kv = LayerKV(1, KV_HEADS, 16, 32, torch.float32, "cpu", None, "q8")
    calls = []

    class Counted:
        def write(self, *args):
            calls.append(args)
            return kv_codec.write(*args)

        read = staticmethod(kv_codec.read)

    kv.write_row(0, 2, k, v, torch.tensor([2, 5, 6, 9]), Counted())  # not consecutive: the Python encode
    assert calls == []
    monkeypatch.setenv(kv_codec.ENV, "0")
    assert not kv_codec.write(kv, 0, 0, k, v) and kv_codec.read(kv, 0, 0, 4) is None
    monkeypatch.setenv(kv_codec.ENV, "fast")
    with pytest.raises(ValueError, match="STRATA_KV_CODEC_KERNEL='fast' is not one of 0, 1, auto"):
        kv_codec.native_kv_codec()


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_the_models_rows_go_through_it_with_the_same_logits(native, fmt, monkeypatch):
    model = load_model("strata-tiny-moe")[0]
    install(model)
    used = []
    counted = kv_codec.Codec(
        lambda *a: used.append("write") or kv_codec.write(*a), lambda *a: used.append("read") or kv_codec.read(*a)
    )
    tile = default_row_tile(model.config, "cpu", torch.float32, 1)
    apply_row_tile(model, tile)
    prompt = torch.randint(0, model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(4)).tolist()

    def logits(codec):
        for layer in model.layers:
            layer.self_attn.kv_codec = codec
        cache = KVCache(model.config, num_slots=2, ctx=64, kv_dtype=fmt)
        out = []
        with torch.inference_mode():
            for rows in ([(1, 0, prompt[:30])], [(1, 30, prompt[30:]), (0, 0, prompt[:7])], [(1, 40, [5])]):
                part = Part.ragged(rows, want_logits=True)
                stage_forward(model, range(model.config.num_layers), cache, part, True, True, tile, "cpu")
                out.append(part.logits)
        return out, cache

    (ours, our_cache), (theirs, their_cache) = logits(counted), logits(None)
    assert "write" in used and "read" in used
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    for i, layer in our_cache.layers.items():
        assert all(_same_bits(layer.parts[n], their_cache[i].parts[n]) for n in layer.parts)
