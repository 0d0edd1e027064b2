"""The finish decision, made once by the engine: EOS, max tokens and the context's end; the token that
ends a request carries the reason, and the streamed events render it without deciding anything."""

from __future__ import annotations

import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine
from strata_engine.finish import finish_reason


def reason(token_id, generated, *, prompt=10, max_tokens=5, ctx=100, eos=7, ignore_eos=False):
    return finish_reason(
        token_id,
        tokens_generated=generated,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        ctx=ctx,
        eos_token_id=eos,
        ignore_eos=ignore_eos,
    )


def test_finish_reason():
    assert reason(3, 1) is None
    assert reason(7, 1) == "stop"  # EOS
    assert reason(7, 1, ignore_eos=True) is None
    assert reason(7, 1, eos=None) is None  # a model without EOS
    assert reason(3, 5) == "length"  # max tokens
    assert reason(7, 5) == "stop"  # EOS wins: it is not an output token
    assert reason(3, 2, prompt=98) == "length"  # the context is full: prompt + generated = ctx
    assert reason(3, 1, prompt=98) is None


@pytest.fixture(scope="module")
def sim_engine():
    with Engine.from_pretrained(executor="sim", batch=2, ctx=64, log_events=False) as engine:
        yield engine


@pytest.mark.parametrize(
    "params, prompt_tokens, expected, count",
    [
        (SamplingParams(max_tokens=5), 10, "length", 5),
        (SamplingParams(max_tokens=1000), 60, "length", 4),  # the context's end: 60 + 4 = 64
    ],
)
def test_the_last_token_carries_the_finish_reason(sim_engine, params, prompt_tokens, expected, count):
    outputs = list(sim_engine.stream(list(range(1, prompt_tokens + 1)), params))
    assert len(outputs) == count
    assert [o.finish_reason for o in outputs] == [None] * (count - 1) + [expected]
