"""The simulator's tokens: greedy takes the most likely, seeded sampling draws, repeatably, as the sampler would."""

from __future__ import annotations

import hashlib

from strata_engine.executors.sim.draws import CANDIDATES, sim_token

DIGEST = hashlib.blake2b(b"a prompt", digest_size=16).digest()
VOCAB, EOS = 32000, 2


def tokens(n=200, **sampling):
    return [sim_token(DIGEST, i, 0, VOCAB, EOS, 0.0, 5, **sampling) for i in range(n)]


def test_greedy_takes_the_most_likely_token_and_reports_the_distribution():
    for t in tokens():
        assert t.token_id == t.top[0][0]
        assert t.logprob == t.top[0][1]
        assert [lp for _, lp in t.top] == sorted((lp for _, lp in t.top), reverse=True)


def test_seeded_sampling_draws_other_tokens_repeatably():
    a, b = tokens(temperature=1.0, seed=7), tokens(temperature=1.0, seed=7)
    assert [t.token_id for t in a] == [t.token_id for t in b]
    others = [t for t in a if t.token_id != t.top[0][0]]
    assert 10 < len(others) < 150  # the top token holds 0.5-0.95 of the mass
    for t in others:  # a drawn token's logprob is its own: listed with it, or below every listed one
        assert (t.token_id, t.logprob) in t.top or t.logprob < t.top[-1][1]
    c = tokens(temperature=1.0, seed=8)
    assert [t.token_id for t in a] != [t.token_id for t in c]


def test_sampling_cuts_reduce_to_greedy():
    greedy = [t.token_id for t in tokens()]
    for cut in ({"top_k": 1}, {"top_p": 1e-6}, {"temperature": 1e-3}):
        sampling = {"temperature": 1.0, "seed": 3, **cut}
        assert [t.token_id for t in tokens(**sampling)] == greedy, cut


def test_top_k_keeps_draws_among_the_k_most_likely():
    for t in tokens(temperature=5.0, top_k=3, seed=1):
        assert t.token_id in [tid for tid, _ in t.top[:3]]
    assert CANDIDATES >= 21  # top_logprobs can ask for 20 alternatives
