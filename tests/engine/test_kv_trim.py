"""KV behind a sliding window goes back to the OS: a slot's memory is bounded by the window, not by ctx,
what attention reads is untouched, and the prompt cache never keeps a prefix whose window was let go of."""

from __future__ import annotations

import os

import pytest
import torch

from strata_engine import SamplingParams
from strata_engine.engine import Engine
from strata_engine.model import kv_cache
from strata_engine.model.config import ModelConfig
from strata_engine.model.kv_cache import KVCache, trim_floor
from strata_engine.model.rows import Row

from test_kv_cache import anon_mib

WINDOW = 64
CONFIG = ModelConfig(
    architecture="mixtral",
    vocab_size=32,
    hidden_size=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=4,
    head_dim=64,
    intermediate_size=32,
    max_position_embeddings=32768,
    sliding_window=WINDOW,
)
CHUNK = 256


def _read(cache: KVCache, slot: int, start: int, end: int) -> None:
    """Positions [start, end) written chunk by chunk, each layer trimmed first as a stage does."""
    for first in range(start, end, CHUNK):
        cache.trim([Row(slot, 0, CHUNK, first, first + CHUNK - 1, True)])
        values = torch.arange(first, first + CHUNK, dtype=torch.float32)[:, None, None].expand(CHUNK, 4, 64)
        for layer in cache.layers.values():
            layer.write_row(slot, first, values, -values)


def test_the_floor_trails_the_window_and_its_margin_in_whole_steps():
    assert trim_floor(10_000, None) == 0
    assert trim_floor(WINDOW + kv_cache.TRIM_MARGIN - 1, WINDOW) == 0
    floor = trim_floor(10_000, WINDOW)
    assert floor % kv_cache.TRIM_STEP == 0 and 10_000 - WINDOW - kv_cache.TRIM_MARGIN - kv_cache.TRIM_STEP < floor
    assert floor <= 10_000 + 1 - WINDOW - kv_cache.TRIM_MARGIN


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_a_slot_holds_about_the_window_and_the_margin_at_any_position():
    cache = KVCache(CONFIG, num_slots=2, ctx=32768)
    before = anon_mib()
    _read(cache, 1, 0, 32768)  # 128 MiB written in all
    grown = anon_mib() - before
    held = 4 * 2 * 4 * 64 * 4 * (WINDOW + kv_cache.TRIM_MARGIN + kv_cache.TRIM_STEP + CHUNK) / 2**20  # ~11 MiB
    assert grown < held + 16, f"the slot grew by {grown:.0f} MiB; it should hold ~{held:.0f} MiB"
    floor = trim_floor(32768 - CHUNK, WINDOW)
    for layer in cache.layers.values():
        assert layer.held_from[1] == floor
        assert torch.equal(layer.k[1, 2, floor:, 0], torch.arange(floor, 32768, dtype=torch.float32))  # all it reads
        assert layer.k[1, :, : floor - 16].abs().sum() == 0  # let go of: zero pages again
        assert layer.k[0].abs().sum() == 0


def test_a_row_of_a_slot_the_cache_lacks_is_left_to_the_forwards_check():
    cache = KVCache(CONFIG, num_slots=2, ctx=8192)
    cache.trim([Row(9, 0, 1, 8000, 8000, True)])  # no IndexError here: the layer's check names the slot
    with pytest.raises(ValueError, match="slot 9 out of range"):
        cache[0].check([[9, 8000, 8000]])


def test_save_copies_from_the_floor_and_restore_puts_it_back_in_another_slot():
    cache = KVCache(CONFIG, num_slots=2, ctx=8192)
    _read(cache, 0, 0, 8192)
    saved = cache.save(0, 8000)
    assert saved.first == cache[0].held_from[0] > 0 and saved.tokens == 8000
    assert saved.nbytes == 4 * 2 * 4 * 64 * 4 * (8000 - saved.first)
    cache.restore(saved, 1, 8000)
    for layer in cache.layers.values():
        assert torch.equal(layer.k[1, :, saved.first : 8000], layer.k[0, :, saved.first : 8000])
        assert torch.equal(layer.v[1, :, saved.first : 8000], layer.v[0, :, saved.first : 8000])
        assert layer.held_from[1] == saved.first


def test_a_window_checkpoint_copies_only_the_window_and_travels_to_stage_ranks_whole():
    from strata_engine.runtime.prefix_copies import PrefixCopy

    cache = KVCache(CONFIG, num_slots=2, ctx=8192)
    _read(cache, 0, 0, 8192)
    saved = cache.save(0, 8000, first=8000 - WINDOW + 1)
    assert (saved.first, saved.nbytes) == (8000 - WINDOW + 1, 4 * 2 * 4 * 64 * 4 * (WINDOW - 1))
    assert cache.save(0, 8000, first=10).first == cache[0].held_from[0]  # never below what the slot holds
    with pytest.raises(ValueError, match=r"\[8000, 8000\)"):
        cache.save(0, 8000, first=8000)
    copy = PrefixCopy("save", 3, 1, 8000, 7000)
    assert PrefixCopy.from_text(copy.to_text()) == copy


def test_a_pinned_range_stays_through_trims_and_goes_with_the_first_trim_after_unpin():
    cache = KVCache(CONFIG, num_slots=2, ctx=8192)
    cache.pin(0, 1000, 1500)
    _read(cache, 0, 0, 8192)
    layer = cache[0]
    assert layer.held_from[0] == 1000
    assert torch.equal(layer.k[0, 1, 1000:1500, 0], torch.arange(1000, 1500, dtype=torch.float32))  # kept
    floor = trim_floor(8192 - CHUNK, WINDOW)
    assert layer.k[0, :, 1536 : floor - 16].abs().sum() == 0  # above the range: let go of, as without a pin
    assert layer.k[0, :, : 1000 - 16].abs().sum() == 0
    saved = cache.save(0, 1500, first=1000)
    assert saved.first == 1000 and saved.nbytes == 4 * 2 * 4 * 64 * 4 * 500
    cache.unpin(0)
    cache.trim([Row(0, 0, 1, 8192, 8192, True)])
    assert layer.held_from[0] == trim_floor(8192, WINDOW) and layer.k[0, :, 1000:1500].abs().sum() == 0


# -- the embedded model (window 1,024): a conversation past the window and its margin ------------------------
PARAMS = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=0)
LONG = [(7 + 31 * i) % 250 for i in range(3600)]  # trims from the first decode on: floor 512
OTHER = [(3 + 17 * i) % 250 for i in range(300)]
TOOL = [(5 + 11 * i) % 250 for i in range(40)]


def _turns(engine):
    """A long turn, its next turn (a slot hit), a short other prompt (pushes it to the store), a third turn
    (a store hit), and a prompt sharing only the first 1,000 tokens (its window was let go of: cold)."""
    out = [engine.generate([LONG], PARAMS)[0]]
    caches = getattr(engine.executor.pipeline, "caches", [])
    assert all(layer.held_from[0] >= 512 for cache in caches for layer in cache.layers.values())  # it trimmed
    second = LONG + out[0].token_ids + TOOL
    out.append(engine.generate([second], PARAMS)[0])
    engine.generate([OTHER], PARAMS)
    third = second + out[1].token_ids + TOOL
    out.append(engine.generate([third], PARAMS)[0])
    out.append(engine.generate([LONG[:1000] + TOOL], PARAMS)[0])
    return [second, third, LONG[:1000] + TOOL], out[1:]


def _same(a, b) -> bool:
    return a.token_ids == b.token_ids and [t.logprob for t in a.logprobs] == [t.logprob for t in b.logprobs]


def test_trimmed_slots_and_stored_prefixes_give_the_bits_of_an_engine_that_keeps_everything(monkeypatch):
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        prompts, cached = _turns(engine)
        hits = [(e.fields["source"], e.fields["tokens"]) for e in engine.events.of_kind("CACHE_HIT")]
    assert [source for source, _ in hits] == ["slot", "store"], hits
    assert cached[2].cached_tokens == 0  # 1,000 shared tokens, but positions below ~1,500 were let go of
    monkeypatch.setattr(kv_cache, "TRIM_MARGIN", 10**9)  # nothing is ever let go of
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, prompt_cache_mib=0, log_events=False) as keeper:
        for prompt, out in zip(prompts, cached):
            assert _same(keeper.generate([prompt], PARAMS)[0], out)


def test_a_turn_after_an_answer_longer_than_the_margin_keeps_the_read_from_its_window_checkpoint(monkeypatch):
    """A hit keeps whole read chunks only (the engine claims batch invariance): after 200 answer tokens the
    slot's window has moved past the read's last whole chunk, so the next turn's hit comes from the window the
    read's end stored, with the bits of an engine that keeps everything."""
    long_answer = SamplingParams(max_tokens=200, ignore_eos=True, logprobs=0)
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        assert engine.executor.batch_invariant
        answer = engine.generate([LONG], long_answer)[0]
        held = engine.executor.kv_held(0)
        prompt = LONG + answer.token_ids + TOOL
        cached = engine.generate([prompt], PARAMS)[0]
        checkpoints = [
            (e.fields["tokens"], e.fields["first"], e.fields["to"]) for e in engine.events.of_kind("CACHE_CHECKPOINT")
        ]
        hits = [(e.fields["source"], e.fields["tokens"]) for e in engine.events.of_kind("CACHE_HIT")]
    exact = len(LONG) - len(LONG) % CHUNK
    assert checkpoints[0] == (exact, exact - 1023, "store")
    assert hits == [("store", exact)] and cached.cached_tokens == exact
    assert held[0] > exact - 1023  # the answer's window had let go of the checkpoint's first positions
    monkeypatch.setattr(kv_cache, "TRIM_MARGIN", 10**9)
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, prompt_cache_mib=0, log_events=False) as keeper:
        assert _same(keeper.generate([prompt], PARAMS)[0], cached)


def test_a_prefix_two_prompts_share_is_kept_for_the_third_after_the_window_moved_past_it(monkeypatch):
    """Agents that share a system prompt: the first's window moved past it, so the second reads it cold but
    keeps its window through the read (a pin) and stores it; the third keeps it, with the bits of an engine
    that keeps everything."""
    system = [(11 + 13 * i) % 250 for i in range(300)]
    prompts = [system + [(7 * agent + 3 * j) % 250 for j in range(3000)] for agent in (1, 2, 3)]
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        outs = [engine.generate([prompt], PARAMS)[0] for prompt in prompts]
        shared = [
            (e.request_id, e.fields["tokens"], e.fields["first"], e.fields["to"])
            for e in engine.events.of_kind("CACHE_CHECKPOINT")
            if e.fields["of"] == "shared prefix"
        ]
        pinned = [layer.pinned for cache in engine.executor.pipeline.caches for layer in cache.layers.values()]
    assert shared == [(outs[1].request_id, 256, 0, "store")]  # the system prompt in whole chunks
    assert [out.cached_tokens for out in outs] == [0, 0, 256]
    assert all(not pins for pins in pinned)  # every pin went with its read's end
    monkeypatch.setattr(kv_cache, "TRIM_MARGIN", 10**9)
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, prompt_cache_mib=0, log_events=False) as keeper:
        assert _same(keeper.generate([prompts[2]], PARAMS)[0], outs[2])


def test_without_batch_invariance_the_shared_prefix_and_the_next_turn_after_it_are_kept(monkeypatch):
    """Where a hit keeps any length (no bitwise claim), the shared prefix is kept as it is (300 tokens), and the
    prompt that kept it from the store keeps its whole turn next time: the slot's floor is the copy's, not the
    floor of the slot it was copied from."""
    from strata_engine.executors.torch_executor import TorchExecutor

    monkeypatch.setattr(TorchExecutor, "batch_invariant", property(lambda self: False))
    system = [(11 + 13 * i) % 250 for i in range(300)]
    # the third is shorter than the second, whose slot had let go of more when it stored the shared prefix
    prompts = [
        system + [(7 * agent + 3 * j) % 250 for j in range(own)] for agent, own in ((1, 3000), (2, 3000), (3, 1500))
    ]
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        outs = [engine.generate([prompt], PARAMS)[0] for prompt in prompts]
        turn = prompts[2] + outs[2].token_ids + TOOL
        after = engine.generate([turn], PARAMS)[0]
    assert [out.cached_tokens for out in outs] == [0, 0, 300]
    assert after.cached_tokens == len(prompts[2]) + len(outs[2].token_ids) - 1  # all it read and fed
