"""The HTTP API over the real Engine: the simulated executor (fast, deterministic, no weights) for the
openai-client round trips, 32 streams on 4 slots and disconnects; the torch executor for greedy equality
with the Python API, on a tiny random MoE checkpoint now and on the shipped tiny model once it exists."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest


from strata_engine.params import SamplingParams
from strata_engine.model.kv_cache import positions_at_rest, positions_held

import strata_engine.engine as engine_mod
import strata_engine.engine_info as engine_info
from server_helpers import metric, serving, wait_for
from tokens_equal import assert_tokens_equal

Engine = engine_mod.Engine
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def sim():
    engine = Engine.from_pretrained(
        executor="sim", batch=4, ctx=4096, prefill_chunk=64, time_scale=50.0, log_events=False
    )
    with engine:
        yield engine


@pytest.fixture(scope="module")
def sim_url(sim):
    with serving(sim) as (url, _app):
        yield url


def test_openai_client_round_trips_on_the_sim_engine(sim, sim_url):
    client = openai.OpenAI(base_url=sim_url + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    assert model == sim.model_name
    want = sim.generate(["Hello, strata"], SamplingParams(max_tokens=20, **GREEDY))[0]
    text = client.completions.create(
        model=model,
        prompt="Hello, strata",
        max_tokens=20,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    assert text.choices[0].model_extra["token_ids"] == want.token_ids
    ids = client.completions.create(
        model=model,
        prompt=want.prompt_token_ids,
        max_tokens=20,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    assert ids.choices[0].model_extra["token_ids"] == want.token_ids
    chunks = list(
        client.completions.create(
            model=model,
            prompt="Hello, strata",
            max_tokens=20,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True, "return_token_ids": True},
        )
    )
    streamed = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
    assert streamed == want.token_ids
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 20
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0
    )
    assert chat.usage.completion_tokens <= 5 and chat.usage.prompt_tokens == len("user: hi\nassistant: ")


def test_32_streams_on_4_slots_each_equal_to_its_solo_output(sim, sim_url):
    prompts = [f"stream {i}: " + "abcdefgh"[: i % 8 + 1] * (i % 3 + 1) for i in range(32)]
    solo = {p: sim.generate([p], SamplingParams(max_tokens=12, **GREEDY))[0].token_ids for p in prompts}

    async def one(client, prompt):
        body = {"prompt": prompt, "max_tokens": 12, "stream": True, "return_token_ids": True, **GREEDY}
        ids, finish, done = [], None, False
        async with client.stream("POST", sim_url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    for choice in json.loads(line[6:])["choices"]:
                        ids += choice["token_ids"]
                        finish = choice["finish_reason"] or finish
        return ids, finish, done

    async def run_all():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(one(client, p) for p in prompts))

    for prompt, (ids, finish, done) in zip(prompts, asyncio.run(run_all())):
        assert done and finish == "length", prompt
        assert_tokens_equal(
            expected=solo[prompt], actual=ids, label=repr(prompt), expected_name="python", actual_name="http"
        )
    assert sim.stats()["free_slots"] == 4 and sim.stats()["waiting"] == 0


def test_a_disconnect_mid_stream_stops_the_request_and_frees_its_slot(sim, sim_url):
    body = {"prompt": "a long answer", "max_tokens": 3000, "stream": True, **GREEDY}
    with httpx.stream("POST", sim_url + "/v1/completions", json=body, headers={"X-Request-Id": "gone-1"}) as r:
        lines = r.iter_lines()
        for _ in range(5):
            next(lines)
    wait_for(lambda: any(e.request_id == "gone-1" for e in sim.events.of_kind("FINISH")), what="cancel")
    finish = next(e for e in sim.events.of_kind("FINISH") if e.request_id == "gone-1")
    assert finish.fields["reason"] == "cancelled", finish
    assert finish.fields["tokens_generated"] < 3000
    assert [e.request_id for e in sim.events.of_kind("BSTOP")] == ["gone-1"]
    wait_for(lambda: sim.stats()["free_slots"] == 4, what="slot freed")
    metrics = httpx.get(sim_url + "/metrics").text
    assert "strata_client_disconnects_total 1.0" in metrics
    assert "strata_slots_busy 0.0" in metrics


@pytest.fixture(scope="module")
def random_moe_dir(tmp_path_factory):
    """A tiny random qwen2_moe checkpoint with a byte-sized vocabulary (bytes, <bos>, <eos>), so text
    prompts work through the byte tokenizer; built with transformers like the model tests' checkpoints."""
    from helpers import COMMON, INIT_RANGE
    from transformers import AutoModelForCausalLM, Qwen2MoeConfig

    config = Qwen2MoeConfig(
        **{**COMMON, "vocab_size": 258, "max_position_embeddings": 512},
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        shared_expert_intermediate_size=40,
        initializer_range=INIT_RANGE,
    )
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("random_moe")
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    return str(directory)


def _shipped_tiny_model() -> str:
    return "strata-tiny-moe"  # shipped in the package: a missing model is a failure, not a skip


@pytest.mark.parametrize("which", ["random-moe", "strata-tiny-moe"])
def test_greedy_over_http_equals_the_python_api_on_the_torch_engine(which, request):
    model = request.getfixturevalue("random_moe_dir") if which == "random-moe" else _shipped_tiny_model()
    engine = Engine.from_pretrained(model, executor="torch", batch=2, ctx=256, prefill_chunk=8, log_events=False)
    prompts = ["The quick brown fox", "def add(a, b):", [1, 2, 3, 4, 5]]
    with engine, serving(engine) as (url, _app):
        want = engine.generate(prompts, SamplingParams(max_tokens=12, **GREEDY))
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
        for prompt, expect in zip(prompts, want):
            got = client.completions.create(
                model=engine.model_name,
                prompt=prompt,
                max_tokens=12,
                temperature=0,
                extra_body={"ignore_eos": True, "return_token_ids": True},
            )
            ids = got.choices[0].model_extra["token_ids"]
            assert_tokens_equal(
                expected=expect.token_ids, actual=ids, label=repr(prompt), expected_name="python", actual_name="http"
            )
            assert got.choices[0].text == expect.text
            chunks = list(
                client.completions.create(
                    model=engine.model_name,
                    prompt=prompt,
                    max_tokens=12,
                    temperature=0,
                    stream=True,
                    extra_body={"ignore_eos": True, "return_token_ids": True},
                )
            )
            streamed = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
            assert_tokens_equal(
                expected=expect.token_ids,
                actual=streamed,
                label=f"{prompt!r} streamed",
                expected_name="python",
                actual_name="http",
            )
            assert "".join(c.choices[0].text for c in chunks if c.choices) == expect.text


CACHE_PROMPT = [(7 + 31 * i) % 250 for i in range(100)]  # 100 tokens: 96 reusable in whole 16-token chunks on CPU
OTHER_PROMPT = [(3 + 17 * i) % 250 for i in range(60)]
CACHE_METRICS = (
    "strata_prompt_cache_queries_total",
    "strata_prompt_cache_hits_total",
    "strata_prompt_cache_evicted_tokens_total",
)


def _sample(url: str, line_start: str) -> float:
    """The value of the one /metrics sample whose line starts with `line_start` (name and labels)."""
    found = [line for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith(line_start + " ")]
    assert len(found) == 1, f"{line_start} missing from /metrics"
    return float(found[0].rsplit(" ", 1)[1])


@pytest.mark.parametrize("mib", [1024, 0])
def test_prompt_cache_metrics_grow_by_the_cached_tokens_usage_reports(mib):
    """The same prompt twice on the embedded model (one slot): queries grow by both prompts, hits (from a slot) by
    the second response's cached_tokens; another prompt pushes the first out to the host store, whose bytes the
    gauge shows as /v1/engine does. With --prompt-cache 0 nothing hits, nothing is evicted, the store is 0 B."""
    engine = Engine.from_pretrained(batch=1, prefill_chunk=16, prompt_cache_mib=mib, log_events=False)
    with engine, serving(engine) as (url, _app):
        before = {name: metric(url, name) for name in CACHE_METRICS}
        usages = [
            httpx.post(
                url + "/v1/completions", json={"prompt": CACHE_PROMPT, "max_tokens": 4, **GREEDY}, timeout=300
            ).json()["usage"]
            for _ in range(2)
        ]
        first, second = (u["prompt_tokens_details"]["cached_tokens"] for u in usages)
        grew = {name: metric(url, name) - before[name] for name in CACHE_METRICS}
        assert grew["strata_prompt_cache_queries_total"] == 2 * len(CACHE_PROMPT)
        assert first == 0 and grew["strata_prompt_cache_hits_total"] == second
        assert _sample(url, 'strata_prompt_cache_hits_total{source="slot"}') == second
        assert _sample(url, 'strata_prompt_cache_hits_total{source="store"}') == 0
        httpx.post(url + "/v1/completions", json={"prompt": OTHER_PROMPT, "max_tokens": 4, **GREEDY}, timeout=300)
        info = httpx.get(url + "/v1/engine").json()["prompt_cache"]
        assert _sample(url, "strata_prompt_cache_store_bytes") == info["store_bytes"]
        assert _sample(url, "strata_prompt_cache_store_capacity_bytes") == (mib << 20)
        evictions = engine.events.of_kind("CACHE_EVICT")
        evicted = sum(e.fields["tokens"] for e in evictions)
        assert metric(url, "strata_prompt_cache_evicted_tokens_total") - before[CACHE_METRICS[2]] == evicted
        if mib:  # the slot's prefix goes to the store each time a turn does not repeat all of it
            assert second > 0 and info["store_bytes"] > 0 and evicted > 0
            to_store = sum(e.fields["source"] == "slot" and e.fields["to"] == "store" for e in evictions)
            assert _sample(url, 'strata_prompt_cache_evictions_total{outcome="store",source="slot"}') == to_store > 0
        else:
            assert second == 0 and info["store_bytes"] == 0 and evicted == 0


def test_the_engine_reports_its_kv_format_and_holds_no_kv_memory_before_a_request():
    """At the model's full context a slot reserves 512 MiB of float32 KV; none of it is resident until written,
    a slot holds at most the window's share of it, and /v1/engine and /metrics say what a position costs,
    what a slot holds at most and what the process holds."""
    before = engine_info._rss_bytes()  # this process holds whatever the tests before it loaded
    engine = Engine.from_pretrained(batch=2, ctx=131072, log_events=False)
    with engine:
        info = engine.info()
        kv = info["kv"]
        assert info["mkl_cbwr"] == "AUTO,STRICT", info["mkl_cbwr"]  # the suite's conftest pins it as a model load does
        assert kv == {
            "dtype": "float32",
            "format": "f32",
            "bytes_per_position": 4 * 2 * 4 * 32 * 4,
            "positions_per_slot": 131072,
            "positions_held_per_slot": positions_held(1024, 512),
            "positions_held_at_rest": positions_at_rest(1024),
            "reserved_bytes": 4096 * 131072 * 2,
            "held_bytes_max": 4096 * positions_held(1024, 512) * 2,
            "committed": "as written",
            "committed_bytes": 0 if before is not None else None,  # nothing written yet
        }
        with serving(engine) as (url, _app):
            assert _sample(url, 'strata_kv_bytes_per_position{format="f32"}') == 4096
            assert _sample(url, 'strata_kv_positions_per_slot{format="f32"}') == 131072
            assert _sample(url, 'strata_kv_held_bytes_max{format="f32"}') == kv["held_bytes_max"]
        if before is not None:  # Linux
            grown = info["rss_bytes"] - before
            assert grown < kv["reserved_bytes"] // 4, f"the engine added {grown} bytes resident"
        assert engine.generate("a short prompt")[0].text is not None
        if before is not None:  # a slot past the window holds at most its bound at rest (between decode steps)
            engine.generate([[(7 + 31 * i) % 250 for i in range(3000)]], SamplingParams(max_tokens=4, ignore_eos=True))
            committed = engine.info()["kv"]["committed_bytes"]
            assert 1024 * 4096 <= committed <= (positions_at_rest(1024) + 64) * 4096, committed  # + the short one
