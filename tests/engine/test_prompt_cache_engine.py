"""The prompt cache end to end on the real model (CPU, where the engine claims bitwise invariance): an agent's
turns served from a slot and from the host store give the cold answer's tokens and chosen-token logprobs bit
for bit, on one group, the mixed read, pieces and stage ranks; a restore at a wrong offset is caught (the
negative control); a unique cache_salt reads cold. Over HTTP (the simulator): usage and /v1/engine."""

from __future__ import annotations

import httpx
import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine
from strata_engine.model.kv_cache import KVCache

from server_helpers import serving

CHUNK = 16
PARAMS = SamplingParams(max_tokens=12, ignore_eos=True, logprobs=0)
A1 = [(7 + 31 * i) % 250 for i in range(150)]
B1 = [(3 + 17 * i) % 250 for i in range(120)]
TOOL = [(5 + 11 * i) % 250 for i in range(40)]


def first_difference(*, cold, cached):
    """None when tokens and chosen-token logprobs are equal; else the index and both sides."""
    pairs = list(
        zip(cold.token_ids, cached.token_ids, [t.logprob for t in cold.logprobs], [t.logprob for t in cached.logprobs])
    )
    for i, (ct, ht, cl, hl) in enumerate(pairs):
        if ct != ht or cl != hl:
            return f"index {i}: cold token {ct} logprob {cl!r}, cached token {ht} logprob {hl!r}"
    return (
        None
        if len(cold.token_ids) == len(cached.token_ids)
        else f"lengths {len(cold.token_ids)} vs {len(cached.token_ids)}"
    )


def agent_session(engine):
    """A's turn 1, A's turn 2 (a slot hit), B's turn 1 (pushes A's prefix out), A's turn 3 (a store hit)."""
    a1 = engine.generate([A1], PARAMS)[0]
    a2_prompt = A1 + a1.token_ids + TOOL
    a2 = engine.generate([a2_prompt], PARAMS)[0]
    engine.generate([B1], PARAMS)
    a3_prompt = a2_prompt + a2.token_ids + TOOL
    a3 = engine.generate([a3_prompt], PARAMS)[0]
    hits = [(e.request_id, e.fields["source"], e.fields["tokens"]) for e in engine.events.of_kind("CACHE_HIT")]
    return (a2_prompt, a2), (a3_prompt, a3), hits


@pytest.fixture(scope="module")
def cold():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, prompt_cache_mib=0, log_events=False) as engine:
        assert engine.info()["prompt_cache"]["slot_reuse"] is False
        yield engine


def check_session(engine, cold):
    assert engine.info()["batch_invariant"] is True and engine.info()["prompt_cache"]["bitwise"] is True
    (a2_prompt, a2), (a3_prompt, a3), hits = agent_session(engine)
    assert [source for _, source, _ in hits] == ["slot", "store"]
    for prompt, cached in ((a2_prompt, a2), (a3_prompt, a3)):
        assert cached.cached_tokens > 0 and cached.cached_tokens % CHUNK == 0
        assert first_difference(cold=cold.generate([prompt], PARAMS)[0], cached=cached) is None
    return a3


LAYOUTS = {
    "one group": (dict(batch=1), {}),
    "mixed read": (dict(batch=2, batch_groups=2, split=2), {"STRATA_PIPED_READ_MIX": "1"}),
    "pieces": (dict(batch=2, batch_groups=2, split=2), {"STRATA_PIPED_READ_PIECE": "2"}),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cached_turns_give_the_cold_bits(layout, cold, monkeypatch):
    """Against a cold read on the same layout (the one-group cold engine where the layout is one group)."""
    setup, env = LAYOUTS[layout]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with Engine.from_pretrained(prefill_chunk=CHUNK, log_events=False, stage_workers="thread", **setup) as engine:
        if setup == {"batch": 1}:
            a3 = check_session(engine, cold)
        else:
            with Engine.from_pretrained(
                prefill_chunk=CHUNK, log_events=False, stage_workers="thread", prompt_cache_mib=0, **setup
            ) as same_layout_cold:
                a3 = check_session(engine, same_layout_cold)
    # A's second prompt (150 + 12 + 40 = 202 tokens) was read: whole chunks of it are reusable, its reply is not
    assert a3.cached_tokens == 192


@pytest.mark.slow
def test_cached_turns_give_the_cold_bits_on_stage_ranks():
    setup = dict(batch=2, batch_groups=2, split=2, prefill_chunk=CHUNK, log_events=False)
    with (
        Engine.from_pretrained(stage_workers="dist", **setup) as engine,
        Engine.from_pretrained(stage_workers="dist", prompt_cache_mib=0, **setup) as cold,
    ):
        assert engine.stage_workers == "dist"
        check_session(engine, cold)


def test_a_restore_at_a_wrong_offset_is_caught(cold, monkeypatch):
    """The negative control: the same session with the store's copy written one position late differs."""
    restore = KVCache.restore

    def one_late(self, saved, slot, tokens):
        restore(self, saved, slot, tokens)
        for i in saved.layers:
            layer = self.layers[i]
            layer.k[slot, :, 1:tokens] = layer.k[slot, :, : tokens - 1].clone()
            layer.v[slot, :, 1:tokens] = layer.v[slot, :, : tokens - 1].clone()

    monkeypatch.setattr(KVCache, "restore", one_late)
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        _, (a3_prompt, a3), hits = agent_session(engine)
    assert hits[-1][1] == "store"
    assert first_difference(cold=cold.generate([a3_prompt], PARAMS)[0], cached=a3) is not None


def test_a_unique_cache_salt_reads_cold(cold):
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        a1 = engine.generate([A1], PARAMS)[0]
        prompt = A1 + a1.token_ids + TOOL
        salted = engine.generate(
            [prompt], SamplingParams(max_tokens=12, ignore_eos=True, logprobs=0, cache_salt="x" * 43)
        )[0]
        assert salted.cached_tokens == 0 and not engine.events.of_kind("CACHE_HIT")
    assert first_difference(cold=cold.generate([prompt], PARAMS)[0], cached=salted) is None


def test_usage_and_engine_info_over_http():
    with (
        Engine.from_pretrained(executor="sim", time_scale=200.0, batch=2, prefill_chunk=64, log_events=False) as engine,
        serving(engine) as (url, _app),
    ):
        prompt = [(7 + 31 * i) % 250 for i in range(600)]
        first = httpx.post(
            url + "/v1/completions", json={"prompt": prompt, "max_tokens": 8, "return_token_ids": True}
        ).json()
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        turn = prompt + first["choices"][0]["token_ids"] + [1] * 30
        body = {"prompt": turn, "max_tokens": 8, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body) as r:
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
        import json

        usage = json.loads(events[-1])["usage"]
        assert usage["prompt_tokens_details"] == {"cached_tokens": 607} and usage["prompt_tokens"] == 638
        salted = httpx.post(
            url + "/v1/completions", json={"prompt": turn, "max_tokens": 8, "cache_salt": "agent-9"}
        ).json()
        assert salted["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        bad = httpx.post(url + "/v1/completions", json={"prompt": turn, "max_tokens": 8, "cache_salt": ""})
        assert bad.status_code == 400 and "cache_salt" in bad.text
        info = httpx.get(url + "/v1/engine").json()["prompt_cache"]
        assert (info["mib"], info["slot_reuse"], info["hits"]) == (1024, True, 1)
        assert {"store_bytes", "evictions"} <= set(info)
        feed = httpx.get(url + "/v1/events").text
        assert '"kind":"CACHE_HIT"' in feed.replace(" ", "") and '"source":"slot"' in feed.replace(" ", "")


def test_a_cap_the_machine_cannot_hold_is_refused_with_the_numbers():
    from strata_engine.config import EngineConfig

    with pytest.raises(ValueError, match=r"--prompt-cache 1073741824 MiB cannot be held: this machine has \d+ MiB"):
        EngineConfig(prompt_cache_mib=1 << 30)
    assert EngineConfig(prompt_cache_mib=1 << 30, executor="sim").prompt_cache_mib == 1 << 30
