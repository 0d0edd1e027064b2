"""Bad input is a 4xx with an OpenAI-style body naming the field; one request's internal failure is a
500 for it alone; api keys; health while loading. Fake engine behind a real uvicorn server."""

from __future__ import annotations

import threading

import httpx
import pytest

from fakes.engine import FakeEngine
from server_helpers import serving

LIMIT = 16 * 1024


@pytest.fixture(scope="module")
def engine():
    with FakeEngine(batch=2, ctx=256, step_s=0.001) as eng:
        yield eng


@pytest.fixture(scope="module")
def url(engine):
    with serving(engine, max_body_bytes=LIMIT) as (url, _app):
        yield url


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


BAD_COMPLETIONS = [
    # (raw body, status, param, words the message must contain)
    ('{"prompt": "x", ', 400, "body", "malformed JSON"),
    ("", 400, "body", "empty"),
    ("[1, 2]", 400, "body", "JSON object"),
    ('{"prompt": "x", "temperature": NaN}', 400, "body", "NaN"),
    ('{"max_tokens": 3}', 400, "prompt", "required"),
    ('{"prompt": "x", "foo": 1}', 400, "foo", "unknown field"),
    ('{"prompt": "x", "stream_options": {"bar": true}}', 400, "stream_options.bar", "unknown field"),
    ('{"prompt": "x", "max_tokens": "5"}', 400, "max_tokens", "integer"),
    ('{"prompt": "x", "max_tokens": 2.5}', 400, "max_tokens", "integer"),
    ('{"prompt": "x", "max_tokens": -3}', 400, "max_tokens", "-3"),
    ('{"prompt": "x", "max_tokens": 0}', 400, "max_tokens", "between"),
    ('{"prompt": "x", "max_tokens": 100000000000000000000}', 400, "max_tokens", "context length"),
    ('{"prompt": "x", "temperature": "hot"}', 400, "temperature", "number"),
    ('{"prompt": "x", "temperature": -1}', 400, "temperature", "temperature"),
    ('{"prompt": "x", "top_p": 0}', 400, "top_p", "top_p"),
    ('{"prompt": "x", "top_k": -5}', 400, "top_k", "top_k"),
    ('{"prompt": "x", "logprobs": 21}', 400, "logprobs", "logprobs"),
    ('{"prompt": "x", "stream": "yes"}', 400, "stream", "boolean"),
    ('{"prompt": "x", "stop": [""]}', 400, "stop", "stop"),
    ('{"prompt": "x", "n": 2}', 400, "n", "n must be 1"),
    ('{"prompt": "x", "echo": true}', 400, "echo", "echo"),
    ('{"prompt": "x", "presence_penalty": 0.5}', 400, "presence_penalty", "not supported"),
    ('{"prompt": ""}', 400, "prompt", "empty"),
    ('{"prompt": []}', 400, "prompt", "empty"),
    ('{"prompt": 5}', 400, "prompt", "string or a list"),
    ('{"prompt": ["a", "b"]}', 400, "prompt", "batched"),
    ('{"prompt": [1, true]}', 400, "prompt", "token ids"),
    ('{"prompt": [1, 2, 99999]}', 400, "prompt", "99999"),
    ('{"prompt": [-1]}', 400, "prompt", "-1"),
    ('{"prompt": "' + "y" * 300 + '"}', 400, "prompt", "context"),
    ('{"prompt": "x", "model": "gpt-4"}', 404, "model", "gpt-4"),
]


@pytest.mark.parametrize("body,status,param,words", BAD_COMPLETIONS, ids=[b[0][:40] for b in BAD_COMPLETIONS])
def test_bad_completion_requests_name_the_field(url, body, status, param, words):
    r = httpx.post(url + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = error_of(r)
    assert err["param"] == param, err
    assert words.lower() in err["message"].lower(), err
    assert err["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


BAD_CHATS = [
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "user"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "extra": 1}]}, "messages[0].extra"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 50}, "logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": []}, "tools"),
]


@pytest.mark.parametrize("body,param", BAD_CHATS, ids=[str(b[1]) + str(i) for i, b in enumerate(BAD_CHATS)])
def test_bad_chat_requests_name_the_field(url, body, param):
    r = httpx.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param


def test_body_over_the_limit_is_413_declared_or_chunked(url):
    big = b'{"prompt": "' + b"z" * LIMIT + b'"}'
    r = httpx.post(url + "/v1/completions", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and error_of(r)["param"] == "body"

    def chunks():  # no Content-Length: the limit is enforced while reading
        for i in range(0, len(big), 1024):
            yield big[i : i + 1024]

    r = httpx.post(url + "/v1/completions", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "limit" in error_of(r)["message"]


def test_unknown_endpoint_and_method(url):
    assert httpx.get(url + "/v1/nothing").status_code == 404
    assert error_of(httpx.get(url + "/v1/nothing"))["type"] == "not_found_error"
    assert httpx.get(url + "/v1/completions").status_code == 405


def test_an_internal_failure_is_a_500_for_that_request_only(url):
    ok = {"prompt": "fine", "max_tokens": 3, "temperature": 0}
    before = httpx.post(url + "/v1/completions", json=ok).json()["choices"][0]["text"]
    r = httpx.post(url + "/v1/completions", json={"prompt": "__crash__"})  # engine.submit raises
    assert r.status_code == 500 and error_of(r)["type"] == "server_error" and "crashed" in error_of(r)["message"]
    r = httpx.post(url + "/v1/completions", json={"prompt": "__boom__"})  # the request fails in the engine
    assert r.status_code == 500 and error_of(r)["type"] == "server_error"
    r = httpx.post(url + "/v1/completions", json={"prompt": "__boom__", "stream": True})  # before any token
    assert r.status_code == 500 and error_of(r)["type"] == "server_error"
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "__boom__"}]})
    assert r.status_code == 500
    assert httpx.post(url + "/v1/completions", json=ok).json()["choices"][0]["text"] == before
    assert httpx.get(url + "/health").status_code == 200


def test_bad_requests_do_not_disturb_a_stream_in_flight(url):
    body = {"prompt": "steady", "max_tokens": 40, "temperature": 0, "stream": True}
    expect = httpx.post(url + "/v1/completions", json={**body, "stream": False}).json()["choices"][0]["text"]
    text = []
    with httpx.stream("POST", url + "/v1/completions", json=body) as r:
        for i, line in enumerate(r.iter_lines()):
            if i == 2:
                for bad, *_ in BAD_COMPLETIONS[:10]:
                    httpx.post(url + "/v1/completions", content=bad)
            if line.startswith("data: {"):
                import json

                event = json.loads(line[6:])
                text += [c["text"] for c in event["choices"]]
    assert "".join(text) == expect


def test_api_key_is_required_except_for_health(engine):
    with serving(engine, api_key="sekrit") as (url, _app):
        assert httpx.get(url + "/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic sekrit"}):
            r = httpx.get(url + "/v1/models", headers=headers)
            assert r.status_code == 401 and error_of(r)["type"] == "authentication_error"
            assert httpx.post(url + "/v1/completions", json={"prompt": "x"}, headers=headers).status_code == 401
        good = {"Authorization": "Bearer sekrit"}
        assert httpx.get(url + "/v1/models", headers=good).status_code == 200
        assert (
            httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=good).status_code == 200
        )
        text = httpx.get(url + "/metrics", headers=good).text
        assert 'strata_http_requests_total{endpoint="/v1/models",status="401"} 3.0' in text


def test_health_is_503_while_the_engine_loads():
    release = threading.Event()
    eng = FakeEngine(batch=1)

    def load():
        release.wait(10)
        return eng

    with serving(load) as (url, _app):
        r = httpx.get(url + "/health")
        assert (r.status_code, r.json()) == (503, {"status": "loading"})
        r = httpx.post(url + "/v1/completions", json={"prompt": "x"})
        assert r.status_code == 503 and "loading" in error_of(r)["message"]
        release.set()
        for _ in range(200):
            if httpx.get(url + "/health").status_code == 200:
                break
            threading.Event().wait(0.01)
        assert httpx.get(url + "/health").json() == {"status": "ok"}
        assert httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
    assert eng._stop, "a loaded engine is shut down with the app"
