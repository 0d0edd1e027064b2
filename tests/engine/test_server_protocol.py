"""The wire format without a server: request parsing (protocol.py), error bodies (errors.py) and
response objects (render.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from strata_engine.outputs import Completion, TokenOutput
from strata_engine.errors import RequestError
from strata_engine.server.errors import from_validation_error
from strata_engine.server.protocol import ChatRequest, CompletionRequest
from strata_engine.server.render import Render


def tok(index, token_id, text, logprob=None, top=None):
    return TokenOutput(index, token_id, text, logprob, top, 0.0)


def render(kind="completion", **kw):
    return Render(kind=kind, request_id="r1", model="m", prompt_ids=[1, 2], token_str=lambda i: chr(i), **kw)


# ---- protocol -----------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt,expect", [("hi", "hi"), ([1, 2], [1, 2]), (["hi"], "hi"), ([[3, 4]], [3, 4])])
def test_a_batch_of_one_prompt_is_that_prompt(prompt, expect):
    assert CompletionRequest.model_validate({"prompt": prompt}).prompt == expect


def test_sampling_params_defaults_follow_openai_and_minus_one_top_k_is_off():
    params = CompletionRequest.model_validate({"prompt": "x", "top_k": -1, "stop": "\n"}).sampling_params(16, None)
    assert (params.temperature, params.top_p, params.top_k, params.stop, params.max_tokens) == (
        1.0,
        1.0,
        0,
        ("\n",),
        16,
    )


def test_usage_is_on_unless_explicitly_off():
    assert CompletionRequest.model_validate({"prompt": "x"}).include_usage
    assert CompletionRequest.model_validate({"prompt": "x", "stream_options": {"include_usage": True}}).include_usage
    assert not CompletionRequest.model_validate(
        {"prompt": "x", "stream_options": {"include_usage": False}}
    ).include_usage


def test_neutral_values_of_unsupported_fields_are_accepted_others_named():
    ok = {
        "prompt": "x",
        "n": 1,
        "best_of": 1,
        "echo": False,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "user": "u",
        "suffix": None,
    }
    CompletionRequest.model_validate(ok).sampling_params(4, None)
    with pytest.raises(RequestError) as err:
        CompletionRequest.model_validate({**ok, "best_of": 3}).sampling_params(4, None)
    assert err.value.field == "best_of"


def test_chat_template_and_logprobs():
    req = ChatRequest.model_validate(
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
            "logprobs": True,
            "top_logprobs": 3,
        }
    )
    assert req.prompt_text() == "system: s\nuser: ab\nassistant: "
    assert req.logprobs_k() == 3
    assert ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}]}).logprobs_k() is None


@pytest.mark.parametrize(
    "body,param,words",
    [
        ({"prompt": "x", "max_tokens": "3"}, "max_tokens", "valid integer"),
        ({"prompt": "x", "Weird Key": 1}, "Weird Key", "unknown field"),
        ({}, "prompt", "required"),
        ({"prompt": [1, "a"]}, "prompt", "batched"),
    ],
)
def test_validation_errors_name_the_field(body, param, words):
    with pytest.raises(ValidationError) as err:
        CompletionRequest.model_validate(body)
    api = from_validation_error(err.value)
    assert (api.status, api.param) == (400, param) and words in api.message


def test_union_member_tags_are_not_part_of_the_field_name():
    with pytest.raises(ValidationError) as err:
        ChatRequest.model_validate({"messages": [{"role": "user", "content": 5}]})
    assert from_validation_error(err.value).param == "messages[0].content"


# ---- render -------------------------------------------------------------------------------------


def test_completion_chunks_carry_ids_offsets_and_finish():
    r = render(return_token_ids=True, logprobs=True)
    a = r.chunk([tok(0, 72, "H", -0.5, [(72, "H", -0.5), (73, "I", -1.0)])], None)
    b = r.chunk([tok(1, 105, "i", -0.1, [])], "length", tail_text="!", prompt_ids=[1, 2])
    assert a["id"] == b["id"] == "cmpl-r1" and a["object"] == "text_completion"
    assert a["choices"][0]["token_ids"] == [72] and "prompt_token_ids" not in a["choices"][0]
    assert a["choices"][0]["logprobs"] == {
        "tokens": ["H"],
        "token_logprobs": [-0.5],
        "top_logprobs": [{"H": -0.5, "I": -1.0}],
        "text_offset": [0],
    }
    assert b["choices"][0]["logprobs"]["text_offset"] == [1]
    assert b["choices"][0]["text"] == "i!" and b["choices"][0]["finish_reason"] == "length"
    assert b["choices"][0]["prompt_token_ids"] == [1, 2]
    assert r.usage_chunk(2, 2) == {
        **{k: a[k] for k in ("id", "object", "created", "model")},
        "choices": [],
        "usage": {
            "prompt_tokens": 2,
            "completion_tokens": 2,
            "total_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def test_chat_chunks_send_the_role_once():
    r = render("chat")
    first, second = r.chunk([tok(0, 65, "A")], None), r.chunk([tok(1, 66, "B")], "stop")
    assert first["object"] == "chat.completion.chunk" and first["id"] == "chatcmpl-r1"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "A"}
    assert second["choices"][0]["delta"] == {"content": "B"} and "token_ids" not in second["choices"][0]


def test_whole_responses():
    completion = Completion(
        "r1", [1, 2], [65, 66], "AB", [tok(0, 65, "A", -1.0, []), tok(1, 66, "B", -2.0, [])], "stop"
    )
    whole = render(return_token_ids=True).response(completion)
    assert whole["choices"][0] == {
        "index": 0,
        "text": "AB",
        "logprobs": None,
        "finish_reason": "stop",
        "token_ids": [65, 66],
        "prompt_token_ids": [1, 2],
    }
    assert whole["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 2,
        "total_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    chat = render("chat", logprobs=True).response(completion)
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"] == {
        "role": "assistant",
        "content": "AB",
    }
    assert [c["token"] for c in chat["choices"][0]["logprobs"]["content"]] == ["A", "B"]
    with pytest.raises(ValueError):
        Render(kind="embedding", request_id="x", model="m", prompt_ids=[], token_str=str)


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("return_token_ids", [False, True])
def test_the_hot_path_token_event_equals_the_general_chunk(kind, return_token_ids):
    from strata_engine.server.render import dumps

    fast = Render(
        kind=kind, request_id='q"1', model="sim:x", prompt_ids=[], token_str=chr, return_token_ids=return_token_ids
    )
    slow = Render(
        kind=kind, request_id='q"1', model="sim:x", prompt_ids=[], token_str=chr, return_token_ids=return_token_ids
    )
    slow.created = fast.created
    for i, text in enumerate(["H", '"é\n', "", "\u2028\x00"]):
        token = tok(i, 72 + i, text)
        assert fast.token_event(token) == b"data: " + dumps(slow.chunk([token], None)).encode() + b"\n\n"


def test_the_decode_pause_histogram_is_cumulative_with_inclusive_bounds():
    from strata_engine.server.metrics import ServerMetrics

    metrics = ServerMetrics(lambda: {"slots_total": 2, "phase": "x"})
    for gap in (0.001, 0.002, 0.5, 100.0):
        metrics.token_gap(gap)
    text = metrics.render().decode()
    assert 'strata_decode_pause_seconds_bucket{le="0.001"} 1.0' in text
    assert 'strata_decode_pause_seconds_bucket{le="0.5"} 3.0' in text
    assert 'strata_decode_pause_seconds_bucket{le="+Inf"} 4.0' in text
    assert "strata_decode_pause_seconds_count 4.0" in text and "strata_slots_total 2.0" in text
    assert "phase" not in text  # non-numeric stats are not metrics
