"""The slot context: derived from the model and the memory when not given; an explicit one past the
model's positions is refused with the flag that allows it."""

from __future__ import annotations

import pytest

from strata_engine.context_length import ALLOW_FLAG, choose_ctx, kv_bytes_per_token
from strata_engine.model.kv_cache import positions_held

GIB = 2**30


def test_default_is_the_models_positions_when_memory_holds_them():
    choice = choose_ctx(None, 131072, batch=6, per_token=4096, memory=24 * GIB)
    assert choice.ctx == 131072 and "max_position_embeddings" in choice.why


def test_default_shrinks_to_what_a_quarter_of_memory_holds():
    per_token = kv_bytes_per_token(num_layers=32, num_kv_heads=8, head_dim=128, dtype_bytes=2)  # 128 KiB
    choice = choose_ctx(None, 131072, batch=8, per_token=per_token, memory=16 * GIB)
    assert choice.ctx == 4096  # 4 GiB / (8 slots x 128 KiB)
    assert choice.ctx % 256 == 0 and "allows 131072" in choice.why


def test_a_window_bounded_slot_keeps_the_models_positions_where_the_whole_context_would_not_fit():
    # 64 slots x 131,072 positions x 4 KiB = 32 GiB, more than a quarter of 24 GiB; each slot commits at most
    # `held` positions (the CPU cache trims behind the window), 64 x 3,840 x 4 KiB = 960 MiB, which fits
    held = positions_held(window=1024, chunk=512)
    choice = choose_ctx(None, 131072, batch=64, per_token=4096, memory=24 * GIB, held=held)
    assert choice.ctx == 131072 and f"at most {held} positions" in choice.why
    # without the bound (a device that commits what it reserves) the same engine shrinks
    assert choose_ctx(None, 131072, batch=64, per_token=4096, memory=24 * GIB).ctx == 24576
    with pytest.raises(ValueError, match=f"{held} positions each at most.*lower --batch"):
        choose_ctx(None, 131072, batch=4096, per_token=4096, memory=24 * GIB, held=held)


def test_the_bound_covers_every_position_a_trimming_slot_holds():
    import torch

    from strata_engine.model.kv_cache import LayerKV, trim_floor

    window, chunk, ctx = 64, 32, 4096
    layer = LayerKV(1, 1, ctx, 4, torch.float32, "cpu", window=window)
    for first in range(0, ctx - chunk, chunk):
        layer.trim(0, trim_floor(first, window))
        layer.write_row(0, first, torch.ones(chunk, 1, 4), torch.ones(chunk, 1, 4))
        assert first + chunk - layer.held_from[0] <= positions_held(window, chunk)
    assert positions_held(None, chunk) is None


def test_a_short_model_gets_its_own_length_not_a_fixed_default():
    assert choose_ctx(None, 1024, batch=4, per_token=1024, memory=8 * GIB).ctx == 1024


def test_explicit_ctx_past_the_model_is_refused_naming_the_flag_and_allowed_with_it():
    with pytest.raises(
        ValueError, match=f"--ctx 9000 exceeds the model's max_position_embeddings \\(8192\\).*{ALLOW_FLAG}"
    ):
        choose_ctx(9000, 8192, batch=1, per_token=1024, memory=8 * GIB)
    assert choose_ctx(9000, 8192, batch=1, per_token=1024, memory=8 * GIB, allow_beyond_model=True).ctx == 9000
    assert choose_ctx(512, 8192, batch=1, per_token=1024, memory=8 * GIB).ctx == 512


def test_no_room_for_the_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="lower --batch or give --ctx"):
        choose_ctx(None, 8192, batch=64, per_token=1 << 20, memory=GIB)


def test_engine_derives_its_context_from_the_embedded_model():
    from strata_engine import Engine

    engine = Engine.from_pretrained(batch=6)
    try:
        info = engine.info()
        assert engine.ctx == info["ctx"] >= 65536, info
        assert info["ctx_from"]
    finally:
        engine.shutdown()
    with pytest.raises(ValueError, match=ALLOW_FLAG):
        Engine.from_pretrained(batch=1, ctx=engine.ctx + 1)


def test_the_resolved_config_carries_the_chosen_context_everywhere():
    from strata_engine.config import EngineConfig
    from strata_engine.resolved import resolve

    resolved = resolve(EngineConfig(batch=2, env={}))
    assert resolved.config.ctx == resolved.scheduler.ctx == resolved.ctx_choice.ctx
    assert resolved.model_path is not None and resolved.kv_bytes_per_token > 0 and resolved.runtime.threads >= 1
    sim = resolve(EngineConfig(executor="sim", ctx=512, env={}))
    assert (sim.config.ctx, sim.scheduler.ctx, sim.ctx_choice.why, sim.stage_workers) == (512, 512, "--ctx", "none")
