"""The Python API on the real torch engine (the embedded model): solo equals batched, bad input is
contained, continuous batching answers everyone, streaming yields what generate returns."""

from __future__ import annotations

import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine
from strata_engine.errors import RequestError
from tokens_equal import assert_tokens_equal

PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\n",
    "class Stack:\n    def __init__(self):\n        self.",
    "for i in range(10):\n",
    "    return self._",
    "# Copyright 2001 Python Software Foundation\n",
]
GREEDY = SamplingParams(max_tokens=24, ignore_eos=True)


def assert_same_tokens(*, solo, batched, label):
    assert_tokens_equal(expected=solo, actual=batched, label=label, expected_name="solo", actual_name="batched")


@pytest.fixture(scope="module")
def solo_tokens():
    with Engine.from_pretrained(batch=1, log_events=False) as engine:
        return [engine.generate([p], GREEDY)[0].token_ids for p in PROMPTS]


@pytest.mark.parametrize("chunk", [1, 4, 16, 512])
def test_batched_equals_solo_at_chunk_sizes(solo_tokens, chunk):
    with Engine.from_pretrained(batch=4, prefill_chunk=chunk, log_events=False) as engine:
        outs = engine.generate(PROMPTS, GREEDY)
    for prompt, solo, out in zip(PROMPTS, solo_tokens, outs):
        assert out.finish_reason == "length"
        assert_same_tokens(solo=solo, batched=out.token_ids, label=f"chunk={chunk} prompt={prompt!r}")


def test_two_stages_two_groups_equal_solo(solo_tokens):
    with Engine.from_pretrained(batch=4, batch_groups=2, split=2, prefill_chunk=8, log_events=False) as engine:
        outs = engine.generate(PROMPTS, GREEDY)
    for prompt, solo, out in zip(PROMPTS, solo_tokens, outs):
        assert_same_tokens(solo=solo, batched=out.token_ids, label=f"split=2 groups=2 prompt={prompt!r}")


def test_stream_yields_the_generated_tokens():
    with Engine.from_pretrained(batch=2, log_events=False) as engine:
        expected = engine.generate([PROMPTS[0]], GREEDY)[0]
        streamed = list(engine.stream(PROMPTS[0], GREEDY))
    assert [t.token_id for t in streamed] == expected.token_ids
    assert "".join(t.text for t in streamed) == expected.text
    assert [t.index for t in streamed] == list(range(len(streamed)))


def test_seeded_sampling_repeats_and_seeds_differ():
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=7, ignore_eos=True)
    with Engine.from_pretrained(batch=2, log_events=False) as engine:
        a, b = engine.generate([PROMPTS[1], PROMPTS[1]], params)
        c = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=16, temperature=1.0, seed=8, ignore_eos=True))[0]
    assert a.token_ids == b.token_ids
    assert c.token_ids != a.token_ids


def test_logprobs_and_stop_strings():
    with Engine.from_pretrained(batch=1, log_events=False) as engine:
        full = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=24, ignore_eos=True, logprobs=2))[0]
        assert full.logprobs is not None and len(full.logprobs) == len(full.token_ids)
        for out in full.logprobs:
            assert out.logprob <= 0.0
            assert out.top_logprobs[0][0] == out.token_id  # greedy: the chosen token is the most likely
        stop = full.text[5:7]
        stopped = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=24, ignore_eos=True, stop=[stop]))[0]
    assert stopped.finish_reason == "stop"
    assert stop not in stopped.text
    assert full.text.startswith(stopped.text)


def test_bad_requests_are_contained():
    with Engine.from_pretrained(batch=2, ctx=256, log_events=False) as engine:
        handle = engine.submit(PROMPTS[0], GREEDY)
        with pytest.raises(RequestError, match="must not be empty") as err:
            engine.submit("", GREEDY)
        assert err.value.field == "prompt"
        with pytest.raises(RequestError, match="context holds 256"):
            engine.submit("x" * 300, GREEDY)
        with pytest.raises(RequestError, match="not a token id"):
            engine.submit([1, 2, engine.vocab_size], GREEDY)
        with pytest.raises(RequestError, match="max_tokens"):
            SamplingParams(max_tokens=0)
        assert len(handle.result(timeout=60).token_ids) == GREEDY.max_tokens


def test_generation_stops_at_the_context_end():
    with Engine.from_pretrained(batch=1, ctx=64, log_events=False) as engine:
        out = engine.generate(["x" * 60], SamplingParams(max_tokens=50, ignore_eos=True))[0]
    assert out.finish_reason == "length"
    assert len(out.token_ids) == 4


def test_more_requests_than_slots_all_answered_in_order():
    prompts = [f"value_{i} = " for i in range(9)]
    with Engine.from_pretrained(batch=2, log_events=False) as engine:
        outs = engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
        admits = [e.request_id for e in engine.events.of_kind("ADMIT")]
    assert all(len(o.token_ids) == 6 for o in outs)
    assert admits == [o.request_id for o in outs]
