"""`strata-verify cache`: the session plan, the fakes' prefix cache, the judge on made-up evidence, and the real
console script against the synthetic engine with a cache, with a cache that matches one token too far, and
with none."""

from __future__ import annotations

import json
import re

import pytest

from strata_bench.engines.result import StreamResult
from strata_bench.synthetic.cache import PrefixCache, answer_prompt
from strata_verify.cache import phases
from strata_verify.cache.plan import CacheOptions, CachePlan, Prompts
from strata_verify.cache.run import CacheRun, Turn
from strata_verify.cache.steps import EVICTION, GIVE_WAY, HITS, judge
from strata_verify.engine_proc import Target
from strata_verify.report import FAIL, NOT_APPLICABLE, NOT_EXERCISED, PASS

from .support import fake, verify

SMALL = ("--scale", "0.25", "--turns", "3", "--evict-sessions", "4")


# -- the plan ------------------------------------------------------------------------------------------
def test_each_turn_extends_the_previous_prompt_by_its_answer_and_a_tool_result():
    plan, prompts = CachePlan(scale=0.25), Prompts("n1", 1000, 0)
    first = prompts.first_turn(plan, "s0")
    assert len(first) == plan.turn_tokens(0) == 256
    assert (
        first[: plan.system_tokens] == prompts.first_turn(plan, "s1")[: plan.system_tokens]
    )  # the shared system prompt
    assert first[plan.system_tokens :] != prompts.first_turn(plan, "s1")[plan.system_tokens :]
    second = prompts.next_turn(plan, "s0", 1, first, [7] * plan.answer_tokens)
    assert second[: len(first)] == first and second[len(first) : len(first) + 16] == [7] * 16
    assert len(second) == plan.turn_tokens(1)
    assert 0 not in first + second  # never EOS
    assert Prompts("n2", 1000, 0).first_turn(plan, "s0") != first  # a new run is cold


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"turns": 1}, "--turns"),
        ({"scale": 0}, "--scale"),
        ({"scale": 0.001}, "system prompt"),
        ({"answer_tokens": 0}, "--tokens"),
    ],
)
def test_bad_plans_are_refused_naming_the_option(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CachePlan(**kwargs)


def test_unknown_lacks_names_the_cache_checks_behaviours():
    with pytest.raises(ValueError, match="known: give-way, events"):
        CacheOptions(lacks=frozenset({"pieces"}))


# -- the fakes' prefix cache -----------------------------------------------------------------------------
def test_prefix_cache_longest_match_leaves_the_last_token_to_read_and_keeps_salts_apart():
    cache = PrefixCache(capacity_tokens=100)
    cache.keep([1, 2, 3, 4])
    cache.keep([1, 2, 9])
    assert cache.lookup([1, 2, 3, 4, 5]).cached_tokens == 4
    assert cache.lookup([1, 2, 3, 4]).cached_tokens == 3  # the whole prompt kept: its last token is still read
    assert cache.lookup([1, 2, 3, 4, 5], salt="other").cached_tokens == 0
    assert cache.lookup([8, 2, 3]).cached_tokens == 0


def test_prefix_cache_evicts_least_recently_used_and_a_grown_prompt_replaces_its_prefix():
    cache = PrefixCache(capacity_tokens=10)
    assert cache.keep([1, 2, 3]) == []
    assert cache.keep([1, 2, 3, 4, 5]) == []  # the same session grew: one entry
    assert cache.held_tokens == 5
    assert cache.keep([7, 7, 7, 7]) == []
    cache.lookup([1, 2, 3, 4, 5, 6])  # touch the first
    assert cache.keep([8, 8, 8]) == [4]  # 12 > 10: the 7s were used least recently
    assert cache.lookup([7, 7, 7, 7, 1]).cached_tokens == 0


def test_one_too_far_claims_one_more_token_and_answers_without_it():
    cache = PrefixCache(capacity_tokens=100, fault="one-too-far")
    cache.keep([1, 2, 3])
    hit = cache.lookup([1, 2, 3, 4, 5])
    assert hit.cached_tokens == 4 and answer_prompt([1, 2, 3, 4, 5], hit) == [1, 2, 3, 5]


# -- the judge on made-up evidence ----------------------------------------------------------------------
def _answer(name, ids, cached=None):
    usage = (
        {"prompt_tokens": 10}
        if cached is None
        else {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": cached}}
    )
    return StreamResult(
        name=name,
        request_id=f"rid-{name}",
        token_ids=list(ids),
        usage=usage,
        finish_reason="length",
        times=[1.0 + i for i in range(len(ids))],
        sent_at=0.5,
    )


def _run(cold_ids=(1, 2, 3), cached=5, events=None, lacks=frozenset()):
    run = CacheRun(target=Target(command="x"), options=CacheOptions(plan=CachePlan(), lacks=lacks), cold_how="salt")
    for phase, session in (("sessions", "s0"), ("eviction", "e0"), ("give-way", "g")):
        for turn in (0, 1):
            name = f"{session}.t{turn}"
            run.add(
                Turn(
                    name,
                    phase,
                    session,
                    turn,
                    [5] * 10,
                    _answer(name, [1, 2, 3], cached if turn else 0),
                    _answer(name, cold_ids if turn else (1, 2, 3), 0),
                )
            )
    long = Turn("long", "give-way", "long", 0, [6] * 40, _answer("long", [4, 4], 0), _answer("long", [4, 4], 0))
    long.served.times, run.turns["g.t1"].served.sent_at = [9.0, 9.5], 0.6  # the turn went first
    run.add(long)
    run.events = events if events is not None else {"sessions": None, "give-way": None, "eviction": None}
    return run


def _status(steps, name):
    return next(s for s in steps if s.name == name)


def test_judge_passes_hits_and_equal_answers_and_fails_a_difference_naming_request_and_index():
    steps = judge(_run())
    assert _status(steps, HITS).status == PASS
    assert _status(steps, "session s0: cached == cold").status == PASS
    assert _status(steps, GIVE_WAY).status == PASS  # from the client's clock: no feed
    assert _status(steps, EVICTION).status == NOT_EXERCISED  # no feed, not declared
    bad = _status(judge(_run(cold_ids=(1, 9, 3))), "session s0: cached == cold")
    assert bad.status == FAIL and "request s0.t1" in bad.reason and "token 1" in bad.reason
    assert "cached 2, cold 9" in bad.reason


def test_judge_without_any_hit_evidence_is_not_exercised_and_lacks_events_makes_eviction_not_applicable():
    steps = judge(_run(cached=None, lacks=frozenset({"events"})))
    assert _status(steps, HITS).status == NOT_EXERCISED and "no cached_tokens" in _status(steps, HITS).reason
    assert _status(steps, EVICTION).status == NOT_APPLICABLE


def test_judge_reads_hits_and_evictions_from_events():
    events = [
        {"kind": "CACHE_HIT", "request_id": "rid-s0.t1", "tokens": 8, "source": "store"},
        {"kind": "CACHE_EVICT", "request_id": None, "tokens": 30},
    ]
    steps = judge(
        _run(
            cached=0,
            events={
                "sessions": events,
                "give-way": [
                    {"kind": "CACHE_HIT", "request_id": "rid-g.t1", "tokens": 8, "source": "slot"},
                    {"kind": "YIELDED", "request_id": "rid-long", "slot": 1, "tokens_read": 16, "to": "rid-g.t1"},
                ],
                "eviction": events,
            },
        )
    )
    assert _status(steps, HITS).status == PASS and "CACHE_HIT event (source store)" in "\n".join(
        _status(steps, HITS).evidence
    )
    assert _status(steps, EVICTION).status == PASS
    assert _status(steps, GIVE_WAY).status == PASS and "16 tokens" in _status(steps, GIVE_WAY).reason


# -- the console script against the synthetic engine ------------------------------------------------------
def test_cache_passes_on_an_engine_whose_cache_is_right(tmp_path):
    junit = tmp_path / "cache.xml"
    result = verify(
        "cache",
        *SMALL,
        "--engine",
        fake("--prompt-cache", "64"),
        "--junit",
        str(junit),
        "--json",
        str(tmp_path / "cache.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[    PASS     ] cache: eviction exercised" in result.stdout
    assert "on a fresh engine started with --prompt-cache 0" in result.stdout
    assert 'failures="0"' in junit.read_text()
    raw = json.loads((tmp_path / "cache.json").read_text())["raw"]
    assert raw["turns"]["s0.t1"]["served"]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_a_prefix_matched_one_token_too_far_fails_naming_the_request_and_the_first_differing_token():
    result = verify("cache", *SMALL, "--engine", fake("--prompt-cache", "64", "--cache-fault", "one-too-far"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "session s0: cached == cold: request s0.t1 differs from its cold read at token 0" in result.stdout
    assert "first differing token at index 0: cached" in result.stdout


def test_an_engine_without_a_cache_is_not_exercised():
    result = verify("cache", *SMALL, "--sessions", "1", "--engine", fake())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[NOT EXERCISED] cache: later turns served from the cache" in result.stdout


def test_on_a_url_the_cold_reads_carry_a_fresh_cache_salt_and_no_feed_is_declared():
    from strata_bench.engines.launcher import EngineProcess

    with EngineProcess(fake("--prompt-cache", "64", "--no-events"), name="fake") as server:
        result = verify("cache", *SMALL, "--url", server.url, "--lacks", "events")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "each cold read with a fresh cache_salt" in result.stdout
    assert "[NOT APPLICABLE] cache: eviction exercised" in result.stdout
    assert "(the give-way seen from outside)" in result.stdout


def test_bad_input_is_a_usage_error():
    result = verify("cache", "--lacks", "pieces")
    assert result.returncode == 2 and "known: give-way, events" in result.stderr


# -- the gaps closed: logprobs where a hit claims the cold read's bits, the store's restore, salts kept apart -------
def _failed(out):
    return [line for line in out.stdout.splitlines() if line.startswith("[    FAIL     ]")]


def test_the_store_restore_and_the_salts_are_exercised_and_shown_on_a_right_cache():
    result = verify("cache", *SMALL, "--engine", fake("--prompt-cache", "64", "--batch-invariant"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "[    PASS     ] cache: host store restore exercised: r0.t1 was restored from the host store" in result.stdout
    )
    assert "[    PASS     ] cache: no prefix crosses a cache_salt" in result.stdout
    assert "x.other-salt: salt b, 288 prompt tokens, 0 cached" in result.stdout
    assert "logprobs bitwise" in result.stdout and "bitwise equal, as the engine claims" in result.stdout


def test_a_hit_whose_logprobs_moved_fails_where_the_engine_claims_bitwise_and_token_ids_alone_pass():
    shifted = ("--prompt-cache", "64", "--cache-fault", "logprob-shift")
    old = verify("cache", *SMALL, "--logprob-tol", "1", "--engine", fake(*shifted))  # ids only, as the check was
    assert old.returncode == 0, old.stdout + old.stderr
    bounded = verify("cache", *SMALL, "--engine", fake(*shifted))  # no claim: Strata's default tolerance, 1e-4
    assert bounded.returncode == 1 and "over the tolerance 0.0001" in bounded.stdout, bounded.stdout
    new = verify("cache", *SMALL, "--engine", fake(*shifted, "--batch-invariant"))
    assert new.returncode == 1, new.stdout + new.stderr
    assert re.search(
        r"session s0: cached == cold: request s0\.t\d: logprob at token \d+ differs from its cold read by "
        r"0\.019 \(cached -[0-9.]+, cold -[0-9.]+\)",
        new.stdout,
    ), new.stdout


def test_the_restore_phase_pushes_r0_out_even_where_a_cold_prompt_draws_r0s_first_token(monkeypatch):
    # Run nonce 0000003c draws r4-alone's first token equal to the system prompt's (277 of 1000): the fake's cache
    # matched that one token, served r4.t0 from r0's entry and kept r0 in a slot (a CI flake, 1 run in ~300).
    plan = CachePlan(scale=0.25)
    prompts = Prompts("0000003c", 1000, 0)
    system, r4 = prompts.piece("system", plan.system_tokens), prompts.piece("r4-alone", plan.turn_tokens(0))
    assert system[0] == r4[0]  # the draw that made the flake
    cache, sources = PrefixCache(64 * 1000), {}

    class Task:  # the engine of the phase: the fake's prefix cache, one request at a time
        def __init__(self, name, prompt):
            self.name, self.prompt = name, prompt
            self.result = StreamResult(name=name, token_ids=[7] * plan.answer_tokens, finish_reason="length")

        def run(self):
            sources[self.name] = cache.lookup(self.prompt).source
            cache.keep(self.prompt + self.result.token_ids)

    run = CacheRun(target=Target(command="x"), options=CacheOptions(plan=plan), prompts=prompts)
    run.info, run.cache_info = {"batch": cache.slots}, {"store": True}
    monkeypatch.setattr(phases, "engine_cache", lambda client: None)
    phases.restore(run, None, lambda run, client, name, prompt: Task(name, prompt), lambda task, what: None)
    assert sources["r0.t1"] == "store", sources
    firsts = [t.prompt[0] for t in run.of("restore") if t.session != "r0"]
    assert system[0] not in firsts and len(set(firsts)) == len(firsts) == cache.slots + 1


def test_a_restore_from_the_store_that_loses_a_position_fails_naming_the_request():
    result = verify(
        "cache",
        *SMALL,
        "--evict-sessions",
        "2",
        "--engine",
        fake("--prompt-cache", "64", "--cache-fault", "store-restore"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert any(
        "store restore: cached == cold: request r0.t1 differs from its cold read at token 0" in line
        for line in _failed(result)
    ), result.stdout
    assert "[    PASS     ] cache: host store restore exercised" in result.stdout


def test_a_cache_that_ignores_the_salt_fails_isolation_and_only_isolation():
    result = verify("cache", *SMALL, "--engine", fake("--prompt-cache", "64", "--cache-fault", "salt-leak"))
    assert result.returncode == 1, result.stdout + result.stderr
    failed = _failed(result)
    assert len(failed) == 1 and "no prefix crosses a cache_salt: request x.other-salt (salt b" in failed[0], (
        result.stdout
    )
    assert "took 256 cached tokens where requests of its own salt share 0: x.holder's prefix (salt a)" in failed[0]


def test_a_turn_that_reaches_the_engine_after_the_long_read_ended_sends_a_fresh_long_read():
    """Timing is not evidence: where the turn comes too late to be given way to (a read that takes no time here),
    the phase runs again, and the step says how many long reads it sent before concluding."""
    result = verify("cache", *SMALL, "--engine", fake("--prompt-cache", "64", "--read-ms-per-token", "0"))
    step = [line for line in result.stdout.splitlines() if "give-way mid-session" in line]
    assert step and "[NOT EXERCISED]" in step[0], result.stdout
    assert "attempt 3: in the earlier one(s) the long read went to its end (g.t1 reached the engine too late" in (
        result.stdout
    )


def test_an_engine_that_never_gives_way_is_not_exercised_after_every_attempt():
    """The engine's events, not the client's clock, decide a retry: a read that went to its end without YIELDED is
    sent again, and an engine that never gives way is named after the last attempt (and fails unless declared)."""
    result = verify("cache", *SMALL, "--engine", fake("--prompt-cache", "64", "--no-yield"))
    step = [line for line in result.stdout.splitlines() if "give-way mid-session" in line]
    assert result.returncode == 1 and step and "[NOT EXERCISED]" in step[0], result.stdout
    assert "attempt 3:" in result.stdout and "went to its end without giving way" in result.stdout
    declared = verify("cache", *SMALL, "--lacks", "give-way", "--engine", fake("--prompt-cache", "64", "--no-yield"))
    assert declared.returncode == 0, declared.stdout
