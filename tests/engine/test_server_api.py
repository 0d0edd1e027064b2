"""The HTTP API (docs/API.md) over a real uvicorn server, driven by the `openai` client and raw httpx,
against the fake engine (tests/fakes/engine.py): formats, streaming, errors, auth, events,
metrics, disconnects. The same checks against the real engine are in test_server_engine.py."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from fakes.engine import FakeEngine

from strata_engine.params import SamplingParams
from server_helpers import metric, serving

M = "fake-tiny"


@pytest.fixture(scope="module")
def engine():
    with FakeEngine(batch=4, ctx=512, step_s=0.001) as eng:
        yield eng


@pytest.fixture(scope="module")
def server(engine):
    with serving(engine, max_body_bytes=64 * 1024) as (url, app):
        yield url, app


@pytest.fixture()
def url(server):
    return server[0]


@pytest.fixture()
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


def sse_events(response: httpx.Response) -> list:
    """The data payloads of an SSE response, JSON-decoded, with "[DONE]" kept as a string."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def solo(engine, prompt, **params):
    return engine.generate(prompt, SamplingParams(**params))


# ---- completions -------------------------------------------------------------------------------


def test_text_and_token_id_prompts_give_the_engines_greedy_output(client, engine):
    expect = solo(engine, "The cat", max_tokens=12, temperature=0)
    got = client.completions.create(
        model=M, prompt="The cat", max_tokens=12, temperature=0, extra_body={"return_token_ids": True}
    )
    choice = got.choices[0]
    assert choice.text == expect.text
    assert choice.finish_reason == expect.finish_reason == "length"
    assert choice.model_extra["token_ids"] == expect.token_ids
    assert choice.model_extra["prompt_token_ids"] == expect.prompt_token_ids
    assert got.usage.prompt_tokens == 7 and got.usage.completion_tokens == 12 and got.usage.total_tokens == 19
    by_ids = client.completions.create(model=M, prompt=engine.tokenizer.encode("The cat"), max_tokens=12, temperature=0)
    assert by_ids.choices[0].text == expect.text
    assert got.id.startswith("cmpl-")


def test_stream_is_one_event_per_token_then_usage_then_done(url, engine):
    expect = solo(engine, "stream me", max_tokens=9, temperature=0)
    body = {"prompt": "stream me", "max_tokens": 9, "temperature": 0, "stream": True, "return_token_ids": True}
    with httpx.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    usage_event, token_events = events[-2], events[:-2]
    assert usage_event["choices"] == [] and usage_event["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 9,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert len(token_events) == 9
    assert all(len(e["choices"][0]["token_ids"]) == 1 for e in token_events)
    assert [e["choices"][0]["finish_reason"] for e in token_events] == [None] * 8 + ["length"]
    assert "".join(e["choices"][0]["text"] for e in token_events) == expect.text
    assert [e["choices"][0]["token_ids"][0] for e in token_events] == expect.token_ids
    assert len({e["id"] for e in events[:-1]}) == 1


def test_an_eos_finish_comes_in_one_more_event_without_a_token(url):
    body = {"prompt": "end __eos__", "max_tokens": 10, "temperature": 0, "return_token_ids": True}
    whole = httpx.post(url + "/v1/completions", json=body).json()["choices"][0]
    assert whole["finish_reason"] == "stop" and len(whole["token_ids"]) == 3
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as r:
        events = sse_events(r)
    choices = [e["choices"][0] for e in events[:-2]]
    assert [c["finish_reason"] for c in choices] == [None, None, None, "stop"]
    assert [len(c["token_ids"]) for c in choices] == [1, 1, 1, 0] and choices[-1]["text"] == ""
    assert choices[-1]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert events[-2]["usage"]["completion_tokens"] == 3 and events[-1] == "[DONE]"


def test_openai_client_streaming_and_usage_opt_out(client, engine):
    expect = solo(engine, "abc", max_tokens=6, temperature=0)
    chunks = list(
        client.completions.create(
            model=M, prompt="abc", max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": False}
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == expect.text
    assert all(c.usage is None for c in chunks)


def test_stop_string_ends_the_text_before_it(client, engine):
    full = solo(engine, "stop test", max_tokens=20, temperature=0).text
    stop = full[6:8]
    cut = full[: full.index(stop)]
    got = client.completions.create(model=M, prompt="stop test", max_tokens=20, temperature=0, stop=[stop])
    assert (got.choices[0].text, got.choices[0].finish_reason) == (cut, "stop")
    chunks = list(
        client.completions.create(model=M, prompt="stop test", max_tokens=20, temperature=0, stop=stop, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == cut
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_logprobs_legacy_form(client):
    got = client.completions.create(model=M, prompt="log", max_tokens=5, temperature=0, logprobs=2)
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == got.choices[0].text
    assert lp.text_offset == list(range(5))
    for chosen, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0 and top[chosen] == logprob and 1 <= len(top) <= 3
    chunks = list(
        client.completions.create(model=M, prompt="log", max_tokens=5, temperature=0, logprobs=2, stream=True)
    )
    streamed = [c.choices[0].logprobs.token_logprobs[0] for c in chunks if c.choices]
    assert streamed == lp.token_logprobs


def test_seeded_sampling_repeats(client):
    a = client.completions.create(model=M, prompt="seed", max_tokens=16, temperature=1.0, seed=7).choices[0].text
    b = client.completions.create(model=M, prompt="seed", max_tokens=16, temperature=1.0, seed=7).choices[0].text
    assert a == b


# ---- chat --------------------------------------------------------------------------------------


def test_chat_uses_the_role_template(client, engine):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    expect = solo(engine, "system: be brief\nuser: hi\nassistant: ", max_tokens=8, temperature=0)
    got = client.chat.completions.create(
        model=M, messages=messages, max_tokens=8, temperature=0, extra_body={"return_token_ids": True}
    )
    assert got.object == "chat.completion" and got.id.startswith("chatcmpl-")
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == expect.text
    assert got.choices[0].model_extra["prompt_token_ids"] == expect.prompt_token_ids
    stream = list(client.chat.completions.create(model=M, messages=messages, max_tokens=8, temperature=0, stream=True))
    token_chunks = [c for c in stream if c.choices]
    assert all(c.object == "chat.completion.chunk" for c in stream)
    assert token_chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content for c in token_chunks) == expect.text
    assert stream[-1].usage.completion_tokens == 8


def test_chat_logprobs_and_max_completion_tokens(client):
    got = client.chat.completions.create(
        model=M,
        messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}],
        max_completion_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = got.choices[0].logprobs.content
    assert len(content) == 4 and all(len(c.top_logprobs) == 2 for c in content)
    assert "".join(c.token for c in content) == got.choices[0].message.content


# ---- other endpoints ---------------------------------------------------------------------------


def test_models_engine_health(url, client):
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-tiny"]
    assert httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"] == 512
    info = httpx.get(url + "/v1/engine").json()
    assert info["batch"] == 4 and info["ctx"] == 512 and info["supports_token_ids"] is True and "version" in info


def test_request_id_header_names_the_request_and_its_events(url):
    r = httpx.post(
        url + "/v1/completions", json={"prompt": "id", "max_tokens": 2}, headers={"X-Request-Id": "my-req.1"}
    )
    assert r.json()["id"] == "cmpl-my-req.1" and r.headers["x-request-id"] == "my-req.1"
    events = [json.loads(line) for line in httpx.get(url + "/v1/events").text.splitlines()]
    assert {"ADMIT", "FINISH"} <= {e["kind"] for e in events if e["request_id"] == "my-req.1"}
    bad = httpx.post(url + "/v1/completions", json={"prompt": "id"}, headers={"X-Request-Id": "has space"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Request-Id"


def test_events_since_and_follow(url):
    r = httpx.get(url + "/v1/events")
    assert r.headers["content-type"].startswith("application/x-ndjson")
    nxt = int(r.headers["x-strata-next-index"])
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [e["index"] for e in lines] == list(range(nxt - len(lines), nxt))
    assert httpx.get(url + f"/v1/events?since={nxt}").text == ""
    got = []

    def follow():
        with httpx.stream("GET", url + f"/v1/events?since={nxt}&follow=1", timeout=10) as resp:
            for line in resp.iter_lines():
                got.append(json.loads(line))
                if got[-1]["kind"] == "FINISH":
                    return

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.2)
    httpx.post(url + "/v1/completions", json={"prompt": "follow me", "max_tokens": 2}, headers={"X-Request-Id": "fol"})
    reader.join(10)
    assert not reader.is_alive()
    assert got[0]["index"] == nxt and [e["kind"] for e in got] == ["ADMIT", "FINISH"]
    assert all(e["request_id"] == "fol" for e in got)
    for query, param in (("since=-1", "since"), ("since=x", "since"), ("follow=maybe", "follow"), ("sinse=1", "sinse")):
        r = httpx.get(url + f"/v1/events?{query}")
        assert r.status_code == 400 and r.json()["error"]["param"] == param, query


def test_metrics_count_requests_tokens_and_slots(url):
    before = metric(url, "strata_generation_tokens_total")
    httpx.post(url + "/v1/completions", json={"prompt": "count", "max_tokens": 3})
    assert metric(url, "strata_generation_tokens_total") == before + 3
    assert metric(url, "strata_slots_total") == 4
    for name in (
        "strata_slots_busy",
        "strata_queue_length",
        "strata_read_pieces_total",
        "strata_give_ways_total",
        "strata_decode_pause_seconds_count",
        "strata_http_requests_total",
        "strata_requests_total",
    ):
        metric(url, name)
    assert metric(url, "strata_decode_pause_seconds_count") > 0
