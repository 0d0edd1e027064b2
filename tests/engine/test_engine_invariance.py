"""Batch invariance end to end: on CPU the engine claims it, and every request's chosen-token logprobs are
bitwise those of its solo run, also when the mixed read runs a prompt chunk and decode rows as one forward."""
from __future__ import annotations

import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine

PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\n",
    "class Stack:\n    def __init__(self):\n        self.",
    # long enough that its read runs as many mixed micro-batches beside the others' decode rows
    "# Copyright 2001 Python Software Foundation\n" + "".join(f"import module_{i}\n" for i in range(14)),
]
WITH_LOGPROBS = SamplingParams(max_tokens=16, ignore_eos=True, logprobs=0)
CHUNK = 16  # the same chunking solo and batched: chunk-size invariance is not claimed


def first_difference(expected, actual):
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


@pytest.fixture(scope="module")
def solo():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        assert engine.info()["batch_invariant"] is True, "CPU fp32 with padding: the engine should claim invariance"
        return [engine.generate([p], WITH_LOGPROBS)[0] for p in PROMPTS]


@pytest.mark.parametrize("setup, env", [(dict(batch=4, prefill_chunk=CHUNK), {}),
                                        (dict(batch=4, batch_groups=2, split=2, prefill_chunk=CHUNK), {"STRATA_PIPED_READ_MIX": "1"})],
                         ids=["one group", "mixed read"])
def test_logprobs_bitwise_equal_to_solo(solo, setup, env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with Engine.from_pretrained(log_events=False, **setup) as engine:
        assert engine.info()["read_mix"] == int(env.get("STRATA_PIPED_READ_MIX", 0))
        assert engine.info()["batch_invariant"] is True
        outs = engine.generate(PROMPTS, WITH_LOGPROBS)
    for prompt, alone, out in zip(PROMPTS, solo, outs):
        index = first_difference(alone.token_ids, out.token_ids)
        assert index is None, f"{prompt!r}: token {index} differs: solo {alone.token_ids[index:index + 4]}, batched {out.token_ids[index:index + 4]}"
        expected, actual = [t.logprob for t in alone.logprobs], [t.logprob for t in out.logprobs]
        index = first_difference(expected, actual)
        assert index is None, f"{prompt!r}: logprob {index} not bitwise equal: solo {expected[index]!r}, batched {actual[index]!r}"
