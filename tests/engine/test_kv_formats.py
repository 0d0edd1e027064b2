"""The KV cache's formats (--kv-dtype): each stores what it says and reads back within its rounding, keeps the
CPU cache's lazy commit and trim for every tensor (scales too), saves its own bytes, and keeps a row's logits
bitwise the same alone and beside other rows within one format."""

from __future__ import annotations

import pytest
import torch

from strata_engine.config import EngineConfig
from strata_engine.context_length import kv_bytes_per_token
from strata_engine.model import load_model
from strata_engine.model.config import ModelConfig
from strata_engine.model.kv_cache import KVCache, LayerKV
from strata_engine.model.kv_format import pack_nibbles, unpack_nibbles
from strata_engine.model.rows import Row
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile
from strata_engine.runtime.native.choice import install
from strata_engine.runtime.pipeline import Part
from strata_engine.runtime.stage_forward import stage_forward

FORMATS = ("f32", "bf16", "q8", "k8v4")
CONFIG = ModelConfig(
    architecture="mixtral",
    vocab_size=32,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    intermediate_size=32,
    max_position_embeddings=8192,
    sliding_window=64,
)


def _kv(tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, 2, 32, generator=g), 3 * torch.randn(tokens, 2, 32, generator=g)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_format_reads_back_within_its_rounding_and_counts_its_bytes(fmt):
    layer = LayerKV(2, 2, 128, 32, torch.float32, "cpu", kv_dtype=fmt)
    k, v = _kv(10)
    layer.write_row(1, 5, k, v)
    got_k, got_v = layer.read(1, 5, 15)
    assert got_k.dtype == got_v.dtype == torch.float32 and got_k.shape == (1, 2, 10, 32)
    # the worst error a position can have: half a step of its own scale
    k_step = {"f32": 0, "bf16": 2**-7, "q8": 1 / 127, "k8v4": 1 / 127}[fmt] * k.abs().amax(-1)
    v_range = v.amax(-1) - v.amin(-1) if fmt == "k8v4" else v.abs().amax(-1)
    v_step = {"f32": 0, "bf16": 2**-7, "q8": 1 / 127, "k8v4": 1 / 15}[fmt] * v_range
    assert ((got_k[0].transpose(0, 1) - k).abs() <= k_step[..., None] / 2 * 1.001 + 1e-7).all()
    assert ((got_v[0].transpose(0, 1) - v).abs() <= v_step[..., None] / 2 * 1.001 + 1e-7).all()
    assert layer.nbytes == 2 * 2 * 128 * kv_bytes_per_token(1, 1, 32, 4, fmt)
    assert layer.views == (fmt == "f32")


def test_nibbles_pack_two_a_byte_low_first():
    q = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    assert pack_nibbles(q).tolist() == [[0x21, 0x0F]] and torch.equal(unpack_nibbles(pack_nibbles(q)), q)


@pytest.mark.parametrize("fmt", ("q8", "k8v4"))
def test_every_tensor_of_a_format_is_trimmed_reset_saved_and_restored(fmt):
    cache = KVCache(CONFIG, num_slots=2, ctx=8192, kv_dtype=fmt)
    layer = cache[0]
    assert set(layer.parts) >= {"k", "v", "k_scale", "v_scale"}
    for first in range(0, 6144, 256):
        cache.trim([Row(1, 0, 256, first, first + 255, True)])
        k, v = _kv(256, first)
        for each in cache.layers.values():
            each.write_row(1, first, k, v)
    floor = layer.held_from[1]
    assert floor > 0 and all(t[1, :, floor:6144].abs().sum() > 0 for t in layer.parts.values())
    assert all(t[1, :, : floor - 1024].abs().sum() == 0 for t in layer.parts.values()), "scales let go of too"
    saved = cache.save(1, 6144)
    assert saved.first == floor and saved.nbytes == (6144 - floor) * kv_bytes_per_token(2, 2, 32, 4, fmt)
    before = [layer.read(1, 6000, 6144)]
    cache.reset(1)
    assert all(t[1].abs().sum() == 0 for t in layer.parts.values()) and layer.held_from[1] == cache.ctx
    cache.restore(saved, 0, 6144)
    after = layer.read(0, 6000, 6144)
    assert all(torch.equal(a, b) for a, b in zip(before[0], after)) and layer.held_from[0] == floor


def test_compile_with_a_quantized_cache_is_refused_naming_the_plain_layout():
    with pytest.raises(ValueError, match="--layout plain"):
        EngineConfig(compile=True, kv_dtype="q8", prompt_cache_mib=0)
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        EngineConfig(kv_dtype="q4", prompt_cache_mib=0)
    assert EngineConfig(compile=True, kv_dtype="f32", prompt_cache_mib=0).kv_dtype == "f32"


@pytest.fixture(scope="module")
def tiny():
    model = load_model("strata-tiny-moe")[0]
    install(model)  # the native ops where the engine serves them (the chunk op reads every format's window)
    return model


def _run(model, cache, rows, tile):
    part = Part.ragged(rows, want_logits=True)
    stage_forward(model, range(model.config.num_layers), cache, part, True, True, tile, "cpu")
    return part.logits


@pytest.mark.parametrize("fmt", ("bf16", "q8", "k8v4"))
def test_a_row_is_bitwise_the_same_alone_and_beside_others_within_a_format(tiny, fmt):
    vocab, tile = tiny.config.vocab_size, default_row_tile(tiny.config, "cpu", torch.float32, 1)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, vocab, (48,), generator=g).tolist()
    others = [(0, 5, prompt[:30]), (1, 17, [3]), (2, 40, [9]), (3, 2, [11])]
    apply_row_tile(tiny, tile)
    try:
        with torch.inference_mode():
            for target in ((7, 24, prompt[24:48]), (7, 48, [prompt[-1]])):
                logits = []
                for beside in ([], others):
                    cache = KVCache(tiny.config, num_slots=8, ctx=128, kv_dtype=fmt)
                    _run(tiny, cache, [(7, 0, prompt[:24])], tile)
                    if target[1] == 48:
                        _run(tiny, cache, [(7, 24, prompt[24:48])], tile)
                    logits.append(_run(tiny, cache, [*beside[:2], target, *beside[2:]], tile)[len(beside[:2])])
                assert torch.equal(logits[0], logits[1]), f"kv {fmt}: a row's logits moved with its neighbours"
    finally:
        apply_row_tile(tiny, 1)
