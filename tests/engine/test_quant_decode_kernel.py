"""The native decode attention over a quantized cache (runtime/native/quant_decode_attention.py): float64 math
on the dequantized values, a row's result alone and beside others, the model's decode rows through it.

The op is built once per machine (g++ and ninja; torch's extension cache keeps it), so the first run of
this file pays ~30 s; where it cannot be built the tests skip, saying why, and the engine uses ATen's path.
"""

from __future__ import annotations

import pytest
import torch

from strata_engine.model import load_model
from strata_engine.model.kv_cache import KVCache, LayerKV
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile
from strata_engine.runtime.native import quant_decode_attention
from strata_engine.runtime.native.choice import install
from strata_engine.runtime.pipeline import Part
from strata_engine.runtime.stage_forward import stage_forward

from helpers import native_op_fixtures

HEADS, KV_HEADS, CTX = 8, 4, 300


the_op_serves, native = native_op_fixtures(
    quant_decode_attention.ENV, quant_decode_attention.native_quant_decode_attention, "quantized decode attention"
)


def _cache(fmt: str, dim: int, seed: int = 0) -> LayerKV:
    kv = LayerKV(3, KV_HEADS, CTX, dim, torch.float32, "cpu", None, fmt)
    g = torch.Generator().manual_seed(seed)
    for slot in range(3):
        kv.write_row(
            slot, 0, torch.randn(CTX, KV_HEADS, dim, generator=g), 3 * torch.randn(CTX, KV_HEADS, dim, generator=g)
        )
    return kv


def _new(rows: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [rows, H, dim] and the rows' new keys and values [rows, Hkv, dim]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, HEADS, dim, generator=g), *(
        3 * torch.randn(rows, KV_HEADS, dim, generator=g) for _ in "kv"
    )


def _reference(q: torch.Tensor, kv: LayerKV, slot: int, low: int, high: int) -> torch.Tensor:
    """Float64 attention over the dequantized keys and values (`LayerKV.read`): [H, hd]."""
    keys, values = (t[0].double().repeat_interleave(HEADS // KV_HEADS, dim=0) for t in kv.read(slot, low, high))
    weights = torch.softmax(q.double()[:, None] @ keys.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
    return (weights @ values)[:, 0]


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
@pytest.mark.parametrize("dim", [32, 64, 128])
def test_the_op_is_float64_math_on_the_dequantized_values(native, fmt, dim):
    kv = _cache(fmt, dim)
    q, k, v = _new(3, dim, seed=1)
    spans = [(2, 10, 200), (0, 0, 1), (1, 37, CTX)]  # block tails, one key, a full cache
    out = quant_decode_attention.attend_decode(q, k, v, kv, spans)
    for i, (slot, low, high) in enumerate(spans):
        expected = _reference(q[i], kv, slot, low, high)
        size = kv.read(slot, low, high)[1].abs().max()  # the values' magnitude
        assert (out[i].double() - expected).abs().max() <= 1e-6 * size, f"kv {fmt}, hd {dim}, row {i}"


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_its_writes_are_bitwise_write_rows(native, fmt):
    ours, theirs = _cache(fmt, 64, seed=5), _cache(fmt, 64, seed=5)
    q, k, v = _new(3, 64, seed=6)
    k[0, 1] = 0.0  # a zero scale
    v[1, 0] = 1.5  # every element the same: a zero 4-bit scale
    spans = [(1, 100, 250), (0, 3, 40), (2, 0, CTX)]
    quant_decode_attention.attend_decode(q, k, v, ours, spans)
    for i, (slot, _, high) in enumerate(spans):
        theirs.write_row(slot, high - 1, k[i : i + 1], v[i : i + 1])
    for name in ours.parts:
        assert torch.equal(ours.parts[name], theirs.parts[name]), f"kv {fmt}: {name} differs from write_row's"


def test_a_row_is_bitwise_the_same_alone_and_beside_others(native):
    for fmt in ("q8", "k8v4"):
        kv = _cache(fmt, 32, seed=2)
        q, k, v = _new(3, 32, seed=3)
        spans = [(1, 100, 250), (0, 3, 40), (2, 0, CTX)]
        together = quant_decode_attention.attend_decode(q, k, v, kv, spans)
        for i, span in enumerate(spans):
            alone = quant_decode_attention.attend_decode(q[i : i + 1], k[i : i + 1], v[i : i + 1], kv, [span])
            assert torch.equal(alone[0], together[i])


def test_the_switch_turns_it_off_and_a_bad_value_is_an_error(native, monkeypatch):
    kv = _cache("q8", 32)
    q, k, v = _new(1, 32, seed=7)
    assert quant_decode_attention.attend_decode(q, k, v, kv, [(0, 0, 5)]) is not None
    monkeypatch.setenv(quant_decode_attention.ENV, "0")
    assert quant_decode_attention.attend_decode(q, k, v, kv, [(0, 0, 5)]) is None  # ATen's path serves
    monkeypatch.setenv(quant_decode_attention.ENV, "maybe")
    with pytest.raises(ValueError, match="STRATA_QUANT_DECODE_KERNEL='maybe' is not one of 0, 1, auto"):
        quant_decode_attention.native_quant_decode_attention()


@pytest.mark.parametrize("fmt", ["q8", "k8v4"])
def test_the_models_decode_rows_go_through_it_and_keep_their_logits_beside_others(native, fmt, monkeypatch):
    model = load_model("strata-tiny-moe")[0]
    install(model)
    answered = []

    def counted(*args):  # the installed hook, its answers kept
        answered.append(quant_decode_attention.attend_decode(*args))
        return answered[-1]

    for layer in model.layers:
        layer.self_attn.decode_attention = counted
    tile = default_row_tile(model.config, "cpu", torch.float32, 1)
    apply_row_tile(model, tile)
    prompt = torch.randint(0, model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(4)).tolist()

    def run(cache, rows):
        part = Part.ragged(rows, want_logits=True)
        stage_forward(model, range(model.config.num_layers), cache, part, True, True, tile, "cpu")
        return part.logits

    logits = []
    with torch.inference_mode():
        for beside in ([], [(0, 12, [3]), (1, 0, prompt[:9])]):
            cache = KVCache(model.config, num_slots=4, ctx=64, kv_dtype=fmt)
            run(cache, [(3, 0, prompt)])
            if beside:
                run(cache, [(0, 0, prompt[:12])])
            logits.append(run(cache, [*beside[:1], (3, 40, [prompt[-1]]), *beside[1:]])[len(beside[:1])])
    assert answered and all(a is not None for a in answered), "the op did not answer the decode rows"
    assert torch.equal(logits[0], logits[1]), f"kv {fmt}: a decode row's logits moved with its neighbours"
    monkeypatch.setenv(quant_decode_attention.ENV, "0")  # ATen's path: the same logits to float32 rounding
    with torch.inference_mode():
        cache = KVCache(model.config, num_slots=4, ctx=64, kv_dtype=fmt)
        run(cache, [(3, 0, prompt)])
        aten = run(cache, [(3, 40, [prompt[-1]])])[0]
    torch.testing.assert_close(aten, logits[0], rtol=0, atol=1e-4)
