"""The `agents` scenario: agent sessions as data, the chain of turns each prompt repeats, the session metrics,
and one run against the synthetic server with a prefix cache and without."""

from __future__ import annotations

import asyncio

import pytest

from strata_bench.driver import RunContext, drive
from strata_bench.engines.families import LLAMA_CPP, VLLM
from strata_bench.metrics import compute_metrics, metric_specs
from strata_bench.scenarios import Scenario, ScenarioError, load_scenario
from strata_bench.sessions import missed_session_join

SMALL = {
    "name": "agents_small",
    "settle_s": 0.0,
    "system_tokens": 64,
    "requests": [
        {
            "name": "agent",
            "count": 2,
            "role": "session",
            "prompt_tokens": 32,
            "turns": 4,
            "tool_tokens": 8,
            "max_tokens": 4,
            "think_s": 0.01,
        },
        {
            "name": "late",
            "role": "session",
            "prompt_tokens": 400,
            "turns": 2,
            "tool_tokens": 8,
            "max_tokens": 4,
            "after_turns": 1,
        },
    ],
}


def test_agents_scales_lengths_and_delays_but_keeps_turns_and_reply_length():
    full = load_scenario("agents")
    assert full.system_tokens == 2048 and [s.name for s in full.sessions] == ["agent0", "agent1", "agent2", "newcomer"]
    small = full.scaled(1 / 16)
    agent, newcomer = small.sessions[0], small.sessions[-1]
    assert (small.system_tokens, agent.prompt_tokens, agent.tool_tokens, agent.think_s) == (128, 128, 16, 0.0625)
    assert (agent.turns, agent.max_tokens, newcomer.prompt_tokens, newcomer.after_turns) == (8, 24, 1024, 2)
    assert Scenario.from_dict(small.to_dict()) == small  # the run JSON's copy loads back
    assert "turns" not in load_scenario("two_joiners").to_dict()["requests"][0]  # other scenarios' JSON unchanged


@pytest.mark.parametrize(
    "change, words",
    [
        (
            {"requests": [{"name": "s", "role": "stream", "prompt_tokens": 8, "max_tokens": 4, "turns": 3}]},
            "are for sessions",
        ),
        (
            {"requests": [{"name": "a", "role": "session", "prompt_tokens": 8, "max_tokens": 4, "turns": 2}]},
            "tool_tokens",
        ),
        (
            {"requests": [{"name": "a", "role": "session", "prompt_tokens": 8, "max_tokens": 4, "after_turns": 1}]},
            "none starts",
        ),
        (
            {
                "requests": [
                    {"name": "a", "role": "session", "prompt_tokens": 8, "max_tokens": 4},
                    {"name": "s", "role": "stream", "prompt_tokens": 8, "max_tokens": 4},
                ]
            },
            "only sessions",
        ),
        ({"system_tokens": -1}, "system_tokens"),
    ],
)
def test_bad_session_scenarios_name_the_field(change, words):
    with pytest.raises(ScenarioError, match=words):
        Scenario.from_dict({**SMALL, **change})


def test_llama_server_is_asked_to_cache_a_session_and_vllm_needs_nothing():
    assert LLAMA_CPP.request_body([1, 2], 4, warm=True)["cache_prompt"] is True
    assert LLAMA_CPP.request_body([1, 2], 4, cold=True)["cache_prompt"] is False
    assert "cache_salt" not in VLLM.request_body([1, 2], 4, warm=True)


def _turn(session, turn, sent, times, cached=None, joined=False, prompt=100):
    return {
        "name": f"{session}.t{turn}",
        "role": "session",
        "session": session,
        "turn": turn,
        "joined": joined,
        "sent_at": sent,
        "first_token_at": times[0] if times else None,
        "token_times": times,
        "ended_at": times[-1] if times else sent,
        "ended_by": "finished",
        "prompt_tokens": prompt,
        "measured_prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
    }


def test_session_metrics_split_cached_from_first_turns_and_measure_the_others_wait_during_a_join():
    requests = [
        _turn("a", 0, 0.0, [1.0, 1.1], cached=0),
        _turn("b", 0, 0.0, [2.0, 2.1], cached=0),
        _turn("a", 1, 1.2, [1.3, 1.4], cached=90),
        _turn("b", 1, 2.2, [2.4, 2.5], cached=80),
        # the newcomer reads from 3.0 to 6.0; a's turn sent at 3.5 waits until 5.5, then a 0.2 s gap
        _turn("new", 0, 3.0, [6.0], cached=0, joined=True, prompt=1000),
        _turn("a", 2, 3.5, [5.5, 5.7], cached=95),
    ]
    m = compute_metrics({"time_scale": 1.0, "requests": requests})
    assert m["ttft_first_p50_s"] == pytest.approx(1.5)
    assert m["ttft_cached_p50_s"] == pytest.approx(0.2)  # 0.1, 0.2, 2.0
    assert m["ttft_s.new"] == pytest.approx(3.0)
    assert m["join_wait_s.new"] == pytest.approx(2.0)
    assert m["cached_tokens_p50"] == 90 and m["cached_share"] == pytest.approx(100 * 265 / 300)
    assert m["output_throughput"] == pytest.approx(11 / 6.0)  # 11 tokens from the first send to the last token
    keys = [s.key for s in metric_specs(Scenario.from_dict(SMALL).to_dict(), has_events=False)]
    assert keys[:3] == ["ttft_cached_p50_s", "ttft_cached_p90_s", "ttft_first_p50_s"] and "join_wait_s.late" in keys


def test_a_join_after_the_others_ended_is_missed_and_says_why():
    done = [_turn("a", 0, 0.0, [1.0]), _turn("new", 0, 2.0, [3.0], joined=True)]
    assert "had ended" in missed_session_join(done)
    assert missed_session_join(done + [_turn("a", 1, 2.5, [3.5])]) is None  # still answering at the join


def _run(url: str, scenario: Scenario, key: str = "k") -> dict:
    return asyncio.run(drive(url, RunContext(run_id=f"run-{key}", scenario=scenario, prompt_key=("nonce", 0, key))))


def test_each_turn_repeats_the_last_prompt_and_a_cache_serves_it(synthetic):
    scenario = Scenario.from_dict(SMALL)
    run = _run(synthetic("--prompt-cache-tokens", "100000", "--itl-ms", "2"), scenario)
    assert run["status"] == "ok", run
    turns = {r["name"]: r for r in run["requests"]}
    assert len(turns) == 2 * 4 + 2
    assert [turns[f"agent0.t{t}"]["measured_prompt_tokens"] for t in range(4)] == [96, 108, 120, 132]
    # a later turn's whole previous prompt is cached (this server keeps prompts, not answers); a joining first
    # turn shares the system prompt
    assert turns["agent0.t2"]["cached_prompt_tokens"] == 108
    assert turns["late.t0"]["joined"] and turns["late.t0"]["cached_prompt_tokens"] == 64
    assert turns["late.t0"]["sent_at"] >= max(turns[f"agent{i}.t0"]["ended_at"] for i in (0, 1))
    assert compute_metrics(run)["cached_share"] > 50
    cold = _run(synthetic("--itl-ms", "2"), scenario)  # no cache: usage says nothing, nothing is claimed
    assert cold["status"] == "ok" and compute_metrics(cold)["cached_share"] is None
    assert [r["token_ids"] for r in cold["requests"] if r["name"] == "agent1.t3"] == [
        r["token_ids"] for r in run["requests"] if r["name"] == "agent1.t3"
    ]


def test_a_session_that_cannot_fit_the_context_fails_the_run_with_the_numbers(synthetic):
    run = _run(synthetic("--ctx", "200"), Scenario.from_dict(SMALL))
    assert run["status"] == "failed" and "session late" in run["failure"] and "context of 200" in run["failure"]
