"""The `many_agents` scenario: dozens of agents of spread context lengths, new agents joining in two waves,
the joins' summary rows and the hit rate, and one small run against the synthetic server with a cache."""

from __future__ import annotations

import asyncio

import pytest

from strata_bench.driver import RunContext, drive
from strata_bench.metrics import compute_metrics, metric_specs
from strata_bench.scenarios import Scenario, ScenarioError, load_scenario

from .test_agents import _turn  # one run-JSON turn builder for the session tests


def test_many_agents_spreads_contexts_from_8k_to_45k_and_scales_them():
    full = load_scenario("many_agents")
    starters = [s for s in full.sessions if s.after_turns is None]
    joining = [s for s in full.sessions if s.after_turns is not None]
    assert len(starters) == 24 and len(joining) == 4 and {s.after_turns for s in joining} == {1, 2}
    totals = [full.system_tokens + s.prompt_tokens for s in starters]
    assert totals[0] == 8192 and totals[-1] == 46080 and totals == sorted(totals) and len(set(totals)) == 24
    small = full.scaled(1 / 8)
    assert (
        small.system_tokens + small.sessions[0].prompt_tokens,
        small.system_tokens + small.sessions[23].prompt_tokens,
    ) == (1024, 5760)
    assert Scenario.from_dict(small.to_dict()) == small


def _agents(**extra):
    return {"name": "m", "requests": [{"name": "a", "role": "session", "prompt_tokens": 10, "max_tokens": 4, **extra}]}


def test_prompt_tokens_max_spreads_a_count_evenly_and_is_checked():
    lengths = [r.prompt_tokens for r in Scenario.from_dict(_agents(count=5, prompt_tokens_max=50)).requests]
    assert lengths == [10, 20, 30, 40, 50]
    assert [r.prompt_tokens for r in Scenario.from_dict(_agents(count=3)).requests] == [10, 10, 10]
    with pytest.raises(ScenarioError, match="give count"):
        Scenario.from_dict(_agents(prompt_tokens_max=50))
    with pytest.raises(ScenarioError, match="prompt_tokens_max must be"):
        Scenario.from_dict(_agents(count=2, prompt_tokens_max=5))


def test_several_joins_give_their_median_ttft_and_the_longest_wait_of_the_working_agents():
    requests = [
        _turn("a", 0, 0.0, [1.0], cached=0),
        _turn("a", 1, 1.5, [1.6, 1.7], cached=90),
        # two agents join together at 2.0; n1's own cold read (2.0 to 5.0) is not a wait of the others
        _turn("n0", 0, 2.0, [3.0], joined=True),
        _turn("n1", 0, 2.0, [5.0], joined=True),
        _turn("a", 2, 2.5, [4.0, 4.1], cached=100),  # a waits 1.5 s, during both joins
        _turn("n0", 1, 3.2, [4.5], joined=True, cached=100),  # n0, working again, waits 1.3 s during n1's join
    ]
    m = compute_metrics({"time_scale": 1.0, "requests": requests})
    assert m["ttft_s.n0"] == pytest.approx(1.0) and m["ttft_s.n1"] == pytest.approx(3.0)
    assert m["ttft_joined_p50_s"] == pytest.approx(2.0)
    assert m["join_wait_s.n0"] == pytest.approx(1.5) and m["join_wait_s.n1"] == pytest.approx(1.5)
    assert m["join_wait_max_s"] == pytest.approx(1.5)
    assert m["cached_share"] == pytest.approx(100 * 290 / 300)  # the hit rate over the later turns
    rows = {s.key: s.label for s in metric_specs(load_scenario("many_agents").to_dict(), has_events=False)}
    assert "ttft_joined_p50_s" in rows and "join_wait_max_s" in rows and "join_wait_s.newcomer0" not in rows
    assert "a new agent joins (any of 4)" in rows["join_wait_max_s"] and rows["cached_share"].startswith("hit rate")


def test_a_small_many_agents_run_is_served_from_the_cache(synthetic):
    scenario = load_scenario("many_agents").scaled(1 / 64)
    url = synthetic("--prompt-cache-tokens", "1000000", "--itl-ms", "1", "--read-ms-per-token", "0.01")
    run = asyncio.run(drive(url, RunContext(run_id="run-m", scenario=scenario, prompt_key=("nonce", 0, "m"))))
    assert run["status"] == "ok", (run.get("failure"), run.get("missed_join"))
    assert len(run["requests"]) == 24 * 4 + 2 * 3 + 2 * 2
    m = compute_metrics(run)
    assert m["cached_share"] > 50 and m["ttft_joined_p50_s"] is not None and m["join_wait_max_s"] is not None
