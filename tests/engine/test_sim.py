"""The simulated executor: its cost model, pipeline arithmetic, deterministic tokens, protocol checks,
profile loading; and the virtual clock it runs on in tests."""

from __future__ import annotations

import json
import math

import pytest

from fakes.scheduler import TEST_PROFILE, FakeClock
from strata_engine.scheduler.request import Phase, Request
from strata_engine.scheduler.run_loop import DecodeSpec, RunSpec
from strata_engine.executors.sim import SimExecutor
from strata_engine.executors.sim.profile import CostProfile, available_profiles, load_profile


def make(profile: CostProfile = TEST_PROFILE, **kw) -> tuple[SimExecutor, FakeClock]:
    clock = FakeClock()
    return SimExecutor(profile, clock=clock, sleep=clock.sleep, vocab_size=1000, **kw), clock


def prompt(request_id: str, n: int, max_tokens: int = 100) -> Request:
    return Request(request_id, [(i * 13 + len(request_id)) % 1000 for i in range(n)], max_tokens)


def read_all(sim: SimExecutor, request: Request, slot: int, chunk: int = 512) -> list:
    tokens = []
    request.slot = slot
    request.phase = Phase.READING
    sim.prepare_slot(slot)

    def on_token(r, t):
        r.output_ids.append(t.token_id)
        tokens.append((r.request_id, t))

    chunks = [(s, min(s + chunk, request.prompt_tokens)) for s in range(0, request.prompt_tokens, chunk)]
    result = sim.read(request, RunSpec(tuple(chunks)), on_token)
    request.tokens_read = request.prompt_tokens
    request.phase = Phase.DECODING
    return tokens, result, on_token


def test_pipelined_run_costs_k_plus_s_minus_1_stage_times():
    sim, clock = make()
    r = prompt("a", 4096)
    _, result, _ = read_all(sim, r, 0)
    stage = TEST_PROFILE.read_chunk_stage_ms(512, 0)  # no context term in the test profile
    assert result.ms == pytest.approx(TEST_PROFILE.read_run_ms + (8 + 2 - 1) * stage)
    assert clock.now == pytest.approx(result.ms / 1000)  # the fake clock moved by exactly the modelled time
    assert (result.chunks, result.tokens) == (8, 4096) and result.first_token is not None
    assert TEST_PROFILE.read_alone_ms(4096, 512) == pytest.approx(result.ms)


def test_attention_makes_later_chunks_dearer():
    p = CostProfile(name="attn", read_token_ms=0.1, read_token_kctx_ms=0.01, decode_step_ms=1.0)
    assert p.read_chunk_stage_ms(512, 32768) > p.read_chunk_stage_ms(512, 0)
    assert p.read_chunk_stage_ms(512, 1000) == pytest.approx(512 * (0.1 + 0.01 * 1.256))


def test_decode_rounds_pipeline_groups_and_respect_the_budget():
    sim, clock = make()
    a, b = prompt("a", 64), prompt("b", 64)
    _, _, on_token = read_all(sim, a, 0)
    read_all(sim, b, 1)
    start = clock.now
    result = sim.decode([[a], [b]], on_token, DecodeSpec(budget_ms=100.0))
    stage = TEST_PROFILE.decode_stage_ms([64])
    # two groups on two stages keep the pipeline full: a round every 2 stage times
    assert result.rounds == math.ceil(100.0 / (2 * stage))
    assert result.tokens == 2 * result.rounds and a.tokens_generated == b.tokens_generated == 1 + result.rounds
    assert result.ms == pytest.approx(2 * stage * result.rounds + stage)  # the last round drains
    assert clock.now - start == pytest.approx(result.ms / 1000)


def test_decode_stops_on_max_rounds_and_should_stop_and_skips_finished():
    sim, _ = make()
    a, b = prompt("a", 64), prompt("b", 64)
    _, _, on_token = read_all(sim, a, 0)
    read_all(sim, b, 1)
    assert sim.decode([[a, b]], on_token, DecodeSpec(max_rounds=3)).rounds == 3
    calls = []
    assert sim.decode([[a, b]], on_token, DecodeSpec(should_stop=lambda: calls.append(1) or len(calls) > 2)).rounds == 2
    b.phase = Phase.FINISHED
    before = b.tokens_generated
    result = sim.decode([[a, b]], on_token, DecodeSpec(max_rounds=2))
    assert result.tokens == 2 and b.tokens_generated == before
    assert sim.decode([[a]], on_token, DecodeSpec(budget_ms=0.0)).rounds == 0  # no budget, no decode


def test_tokens_are_the_same_solo_or_interleaved():
    sim1, _ = make()
    solo = prompt("x", 300)
    _, _, on_token = read_all(sim1, solo, 0, chunk=64)
    sim1.decode([[solo]], on_token, DecodeSpec(max_rounds=20))
    sim2, _ = make()
    x, y = prompt("x", 300), prompt("y", 700)
    read_all(sim2, y, 1)
    _, _, on_token2 = read_all(sim2, x, 0, chunk=100)
    sim2.decode([[x], [y]], on_token2, DecodeSpec(max_rounds=20))
    assert x.output_ids == solo.output_ids and len(solo.output_ids) == 21
    assert x.output_ids != y.output_ids[:21]
    assert len(set(solo.output_ids)) > 10  # not a constant
    assert all(0 <= t < 1000 for t in solo.output_ids)


def test_eos_only_when_asked_and_logprobs_when_wanted():
    sim, _ = make(eos_token_id=0)
    r = prompt("e", 10)
    assert all(sim.token_for(r, i).token_id != 0 for i in range(2000))
    sim2, _ = make(eos_token_id=0, eos_probability=0.5)
    r.logprobs = 3
    tokens = [sim2.token_for(r, i) for i in range(200)]
    assert 50 < sum(t.token_id == 0 for t in tokens) < 150
    t = tokens[0]
    assert len(t.top) == 3 and t.top[0] == (t.token_id, t.logprob)
    assert [lp for _, lp in t.top] == sorted((lp for _, lp in t.top), reverse=True)
    assert sum(math.exp(lp) for _, lp in t.top) <= 1.0
    with pytest.raises(ValueError, match="eos_token_id"):
        make(eos_probability=0.1)


def test_protocol_misuse_is_a_clear_error():
    sim, _ = make()
    r = prompt("m", 1000)
    r.slot = 3
    with pytest.raises(ValueError, match="not prepared"):
        sim.read(r, RunSpec(((0, 512),)), lambda *a: None)
    sim.prepare_slot(3)
    with pytest.raises(ValueError, match="starts at 512"):
        sim.read(r, RunSpec(((512, 1000),)), lambda *a: None)
    with pytest.raises(ValueError, match="contiguous"):
        sim.read(
            r,
            RunSpec(
                (
                    (0, 256),
                    (300, 512),
                )
            ),
            lambda *a: None,
        )
    with pytest.raises(ValueError, match="past the prompt"):
        sim.read(r, RunSpec(((0, 1001),)), lambda *a: None)
    r.phase = Phase.DECODING
    r.tokens_read = 1000  # the scheduler believes the prompt was read; the slot holds nothing
    r.output_ids.append(1)
    with pytest.raises(ValueError, match="holds 0 tokens"):
        sim.decode([[r]], lambda *a: None, DecodeSpec(max_rounds=1))


def test_time_scale_divides_the_sleep_not_the_reported_time():
    sim, clock = make(time_scale=10.0)
    _, result, _ = read_all(sim, prompt("t", 1024), 0)
    assert clock.now == pytest.approx(result.ms / 1000 / 10)


def test_mixed_run_reads_the_prompt_and_advances_the_streams():
    sim, _ = make()
    a, b = prompt("a", 64), prompt("b", 64)
    _, _, on_token = read_all(sim, a, 0)
    read_all(sim, b, 1)
    c = prompt("c", 4096)
    c.slot, c.phase = 2, Phase.READING
    sim.prepare_slot(2)
    chunks = [(s, s + 512) for s in range(0, 4096, 512)]
    result = sim.mixed(c, RunSpec(tuple(chunks)), [[a], [b]], on_token)
    assert result.chunks == 8 and result.tokens == 4096 and result.first_token is not None
    assert result.decode_tokens >= 4 and a.tokens_generated > 1 and b.tokens_generated > 1
    plain, _ = make()
    d = prompt("c", 4096)
    _, plain_result, _ = read_all(plain, d, 0)
    assert result.ms > plain_result.ms  # riders cost something, but far less than stopping to decode
    assert len(result.chunk_ms) == 8


def test_virtual_clock_fires_timers_at_their_time_inside_a_sleep():
    clock = FakeClock()
    seen = []
    clock.at(0.5, lambda: seen.append(clock()))
    clock.at(0.2, lambda: seen.append(clock()))
    clock.sleep(1.0)
    assert seen == [0.2, 0.5] and clock() == 1.0
    assert clock.next_timer() is None


def test_shipped_profiles_load_and_bad_profiles_are_named(tmp_path):
    assert {"pr2050-2x5090", "small-gpu"} <= set(available_profiles())
    p = load_profile("pr2050-2x5090")
    assert p.num_stages == 2 and p.read_run_ms > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "read_token_ms": 0.1, "decode_step_ms": 1, "read_tokn_ms": 1}))
    with pytest.raises(ValueError, match="unknown keys.*read_tokn_ms"):
        load_profile(bad)
    bad.write_text(json.dumps({"name": "bad", "read_token_ms": -1, "decode_step_ms": 1}))
    with pytest.raises(ValueError, match="read_token_ms must be a number >= 0"):
        load_profile(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile(bad)
    with pytest.raises(ValueError, match="no sim profile 'nope'.*pr2050-2x5090"):
        load_profile("nope")
    good = tmp_path / "mine.json"
    good.write_text(json.dumps({"read_token_ms": 0.1, "decode_step_ms": 1}))
    assert load_profile(good).name == "mine"
