"""KVCache: shapes, per-layer placement, reset, and the clear error past ctx."""

from __future__ import annotations

import os

import pytest
import torch

from strata_engine.model.kv_cache import ContextOverflowError, KVCache
from strata_engine.model.config import ModelConfig

CONFIG = ModelConfig(
    architecture="llama",
    vocab_size=32,
    hidden_size=16,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=4,
    intermediate_size=32,
    max_position_embeddings=64,
)


def test_shapes_and_bytes():
    cache = KVCache(CONFIG, num_slots=3, ctx=10)
    assert sorted(cache.layers) == [0, 1, 2, 3]
    for layer in cache.layers.values():
        assert layer.k.shape == layer.v.shape == (3, 2, 10, 4)
        assert layer.k.dtype == torch.float32
    assert cache.nbytes == 4 * 2 * 3 * 2 * 10 * 4 * 4


def test_stage_holds_only_its_layers():
    cache = KVCache(CONFIG, num_slots=2, ctx=8, dtype=torch.bfloat16, layers=range(2, 4))
    assert sorted(cache.layers) == [2, 3] and cache[3].k.dtype == torch.bfloat16
    with pytest.raises(KeyError, match="layer 0 is not held"):
        cache[0]
    with pytest.raises(ValueError, match="layer 4 outside"):
        KVCache(CONFIG, num_slots=2, ctx=8, layers=[4])


def test_write_row_places_tokens_at_slot_and_position():
    cache = KVCache(CONFIG, num_slots=3, ctx=8)
    k = torch.arange(2 * 3 * 2 * 4, dtype=torch.float32).view(2, 3, 2, 4)  # two rows of [T=3, Hkv, hd]
    layer = cache[1]
    layer.check([[2, 4, 6], [0, 0, 2]])
    layer.write_row(2, 4, k[0], -k[0])
    layer.write_row(0, 0, k[1], -k[1], positions=torch.tensor([2, 0, 1]))  # out of order: the masked path's rows
    assert torch.equal(layer.k[2, :, 4:7], k[0].transpose(0, 1)) and torch.equal(
        layer.v[2, :, 4:7], -k[0].transpose(0, 1)
    )
    assert torch.equal(layer.k[0, :, [2, 0, 1]], k[1].transpose(0, 1))
    assert layer.k[1].abs().sum() == 0 and layer.k[2, :, :4].abs().sum() == 0


def test_reset_zeroes_only_that_slot():
    cache = KVCache(CONFIG, num_slots=2, ctx=4)
    for layer in cache.layers.values():
        layer.k.fill_(1.0)
        layer.v.fill_(2.0)
    cache.reset(1)
    assert all(layer.k[1].abs().sum() == 0 and layer.v[1].abs().sum() == 0 for layer in cache.layers.values())
    assert all(layer.k[0].min() == 1.0 and layer.v[0].min() == 2.0 for layer in cache.layers.values())
    with pytest.raises(ValueError, match="slot 2 out of range"):
        cache.reset(2)


def anon_mib() -> float:
    """This process's anonymous resident memory (Linux), MiB."""
    return int(next(line for line in open("/proc/self/status") if line.startswith("RssAnon")).split()[1]) / 1024


WIDE = ModelConfig(
    architecture="llama",
    vocab_size=32,
    hidden_size=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=4,
    head_dim=64,
    intermediate_size=32,
    max_position_embeddings=131072,
)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_memory_is_committed_as_positions_are_written_and_handed_back_on_reset():
    before = anon_mib()
    cache = KVCache(WIDE, num_slots=4, ctx=131072)  # 4 GiB of keys and values, all zeros to attention
    assert cache.nbytes == 4 << 30
    assert anon_mib() - before < 64, "a fresh cache should hold no memory yet"
    assert cache[0].k[3, :, 131071].abs().sum() == 0
    written = torch.ones(4096, 4, 64)
    for layer in cache.layers.values():
        layer.write_row(1, 1000, written, written)
    grown = anon_mib() - before
    assert 30 < grown < 64 + 40, f"4,096 positions in 4 layers are 32 MiB; the cache grew by {grown:.0f} MiB"
    cache.reset(1)
    assert anon_mib() - before < grown - 24, "reset should hand the slot's pages back"
    assert all(layer.k[1].abs().sum() == 0 and layer.v[1].abs().sum() == 0 for layer in cache.layers.values())


def test_past_ctx_is_a_clear_error_and_writes_nothing():
    layer = KVCache(CONFIG, num_slots=2, ctx=8)[0]
    with pytest.raises(ContextOverflowError, match=r"slot 1: position 8 .*ctx=8") as info:
        layer.check([[0, 0, 3], [1, 5, 8]])
    assert (info.value.slot, info.value.position, info.value.ctx) == (1, 8, 8)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match="slot 0 appears in two rows"):
        layer.check([[0, 0, 1], [0, 2, 3]])
    with pytest.raises(ValueError, match="negative position"):
        layer.check([[0, -1, 1]])


def test_bad_sizes():
    with pytest.raises(ValueError, match="num_slots"):
        KVCache(CONFIG, num_slots=0, ctx=8)


def test_free_drops_tensors():
    cache = KVCache(CONFIG, num_slots=1, ctx=4)
    cache.free()
    assert cache.nbytes == 0 and cache.layers == {}
