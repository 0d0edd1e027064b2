import json

import pytest

from strata_bench.scenarios import Scenario, ScenarioError, available_scenarios, load_scenario, parse_scenario_list


def test_bundled_scenarios_match_the_spec():
    assert {"two_joiners", "followup", "read_alone"} <= set(available_scenarios())
    tj = load_scenario("two_joiners")
    assert [s.name for s in tj.streams] == ["stream0", "stream1", "stream2", "stream3"]
    assert [(j.prompt_tokens, j.at_s) for j in tj.joiners] == [(65536, 0.0), (32768, 6.0)]
    fu = load_scenario("followup")
    assert not fu.streams and [(j.prompt_tokens, j.at_s) for j in fu.joiners] == [(46080, 0.0), (24, 1.0)]
    ra = load_scenario("read_alone")
    assert [j.prompt_tokens for j in ra.joiners] == [46080]


def test_scale_multiplies_every_length_and_delay_but_joiners_decode():
    tj = load_scenario("two_joiners").scaled(0.01)
    assert [j.prompt_tokens for j in tj.joiners] == [655, 328]
    assert tj.joiners[1].at_s == pytest.approx(0.06)
    assert tj.streams[0].prompt_tokens == 1  # 0.64 rounds to 1: never below one token
    assert tj.streams[0].max_tokens == 20  # the streams' decode is sized against the reads
    assert [j.max_tokens for j in tj.joiners] == [8, 8]  # a joiner only needs its first tokens
    assert tj.scale == 0.01 and tj.settle_s == pytest.approx(0.01) and tj.stream_tail_s is None
    tailed = Scenario.from_dict(
        {
            "name": "t",
            "stream_tail_s": 2.0,
            "requests": [{"name": "s", "role": "stream", "prompt_tokens": 10, "max_tokens": 10}],
        }
    ).scaled(0.5)
    assert tailed.stream_tail_s == 1.0 and tailed.scaled(2.0).scale == 1.0
    with pytest.raises(ScenarioError):
        load_scenario("two_joiners").scaled(0)


def test_round_trip_through_dict():
    tj = load_scenario("two_joiners").scaled(0.5)
    assert Scenario.from_dict(tj.to_dict()) == tj


@pytest.mark.parametrize(
    "data, words",
    [
        (
            {
                "name": "x",
                "requests": [{"name": "a", "role": "stream", "prompt_tokens": 1, "max_tokens": 1, "colour": 1}],
            },
            "colour",
        ),
        ({"name": "x", "requests": [{"name": "a", "role": "joiner", "prompt_tokens": 1}]}, "max_tokens"),
        ({"name": "x", "requests": [{"name": "a", "role": "reader", "prompt_tokens": 1, "max_tokens": 1}]}, "role"),
        (
            {"name": "x", "requests": [{"name": "a", "role": "joiner", "prompt_tokens": 0, "max_tokens": 1}]},
            "prompt_tokens",
        ),
        (
            {
                "name": "x",
                "requests": [{"name": "a", "role": "stream", "prompt_tokens": 1, "max_tokens": 1, "at_s": 2}],
            },
            "at_s",
        ),
        (
            {
                "name": "x",
                "requests": [
                    {"name": "a", "role": "joiner", "prompt_tokens": 1, "max_tokens": 1},
                    {"name": "a", "role": "joiner", "prompt_tokens": 1, "max_tokens": 1},
                ],
            },
            "unique",
        ),
        ({"name": "x", "requests": []}, "at least one"),
        (
            {
                "name": "x",
                "requests": [{"name": "s", "count": 0, "role": "stream", "prompt_tokens": 1, "max_tokens": 1}],
            },
            "count",
        ),
        ({"requests": []}, "required"),
    ],
)
def test_bad_scenario_data_names_the_field(data, words):
    with pytest.raises(ScenarioError, match=words):
        Scenario.from_dict(data, source="t.json")


def test_unknown_name_lists_what_exists(tmp_path):
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'.*two_joiners"):
        parse_scenario_list("two_joiners,nope")
    with pytest.raises(ScenarioError, match="given twice"):
        parse_scenario_list("followup,followup")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario(str(bad))


def test_a_scenario_file_by_path(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps(
            {
                "name": "mine",
                "requests": [
                    {"name": "s", "count": 2, "role": "stream", "prompt_tokens": 4, "max_tokens": 9},
                    {"name": "j", "role": "joiner", "prompt_tokens": 100, "max_tokens": 2, "at_s": 0.5},
                ],
            }
        )
    )
    (s,) = parse_scenario_list(str(path))
    assert [r.name for r in s.requests] == ["s0", "s1", "j"] and s.joiners[0].at_s == 0.5
