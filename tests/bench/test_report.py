"""report + tables on a hand-made bench directory: known runs in, known table out."""

import json

from strata_bench.report import build_report
from strata_bench.results import ResultsDir, write_json
from strata_bench.scenarios import Scenario
from strata_bench.tables import fmt_value, render

SCENARIO = Scenario.from_dict(
    {
        "name": "sc",
        "description": "one stream, one joiner",
        "settle_s": 0,
        "requests": [
            {"name": "s0", "role": "stream", "prompt_tokens": 4, "max_tokens": 9},
            {"name": "big", "role": "joiner", "label": "the big prompt", "prompt_tokens": 100, "max_tokens": 1},
        ],
    }
)


def make_run(arm, rnd, pause, status="ok", ids=(1, 2, 3)):
    # stream tokens at 0, 0.1, then a pause, then one more; the joiner is sent at 0.05 and answered at 0.1 + pause
    stream = {
        "name": "s0",
        "role": "stream",
        "sent_at": 0.0,
        "first_token_at": 0.0,
        "token_times": [0.0, 0.1, 0.1 + pause],
        "ended_at": 0.1 + pause,
        "ended_by": "finished",
        "token_ids": list(ids),
        "text": "",
        "error": None,
    }
    joiner = {
        "name": "big",
        "role": "joiner",
        "sent_at": 0.05,
        "first_token_at": 0.1 + pause,
        "token_times": [0.1 + pause],
        "ended_at": 0.1 + pause,
        "ended_by": "finished",
        "token_ids": [9],
        "text": "",
        "error": None,
    }
    return {
        "id": f"r{rnd:02d}-sc-{arm}",
        "round": rnd,
        "scenario": "sc",
        "arm": arm,
        "status": status,
        "failure": "arm 'B': the engine exited with status 3" if status == "failed" else None,
        "time_scale": 1.0,
        "engine_events": None,
        "requests": [] if status == "failed" else [stream, joiner],
    }


def make_dir(tmp_path, runs, repeat=3):
    results = ResultsDir(tmp_path / "bench")
    config = {
        "arms": [{"name": "A", "command": "a", "url": None}, {"name": "B", "command": "b", "url": None}],
        "scenarios": [SCENARIO.to_dict()],
        "repeat": repeat,
        "scale": 1.0,
        "time_scale": 1.0,
        "pause_threshold_s": 0.5,
    }
    results.write_meta({"nonce": "n", "config": config, "plan": [r["id"] for r in runs], "provenance": {}})
    for run in runs:
        write_json(results.run_path(run["id"]), run)
    return results


def test_medians_spread_pairs_and_wins(tmp_path):
    runs = [
        make_run("A", 0, 2.0),
        make_run("B", 0, 0.5),
        make_run("B", 1, 0.7),
        make_run("A", 1, 2.2),
        make_run("A", 2, 2.1),
        make_run("B", 2, 0.6),
    ]
    report = build_report(make_dir(tmp_path, runs))
    (sc,) = report["scenarios"]
    pause = next(m for m in sc["metrics"] if m["key"] == "longest_pause_s")
    assert pause["values"]["A"] == [2.0, 2.2, 2.1] and pause["values"]["B"] == [0.5, 0.7, 0.6]
    assert pause["summary"]["A"] == {"n": 3, "median": 2.1, "min": 2.0, "max": 2.2}
    comp = pause["vs_baseline"]["B"]
    assert (comp["n_pairs"], comp["lower"], comp["higher"]) == (3, 3, 0)
    assert report["tokens"]["equal"] and report["tokens"]["compared_requests"] == 6

    md = render(report, "md")
    lines = md.splitlines()
    row = next(line for line in lines if line.startswith("| longest pause of a stream"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells == ["longest pause of a stream", "2.1 s (2–2.2)", "**0.6 s** (0.5–0.7)"]
    assert "- longest pause of a stream: B lower in 3 of 3 pairs; sign test p=0.25" in md
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in lines if line.startswith("|")]
    assert ["longest pause of a stream", "B", "0.5", "0.7", "0.6"] in rows  # the spread table, by round


def test_an_arm_with_a_failed_run_or_request_errors_is_failed_with_no_statistics(tmp_path):
    for bad in ("failed", "errors"):
        runs = [
            make_run("A", 0, 2.0),
            make_run("B", 0, 0.5),
            make_run("B", 1, 0.7),
            make_run("A", 1, 2.2),
            make_run("A", 2, 2.1),
            make_run("B", 2, 9.0, status=bad),
        ]
        report = build_report(make_dir(tmp_path / bad, runs))
        (sc,) = report["scenarios"]
        pause = next(m for m in sc["metrics"] if m["key"] == "longest_pause_s")
        assert sc["failed_arms"] == ["B"] and pause["summary"]["B"] is None and pause["vs_baseline"] == {}
        assert pause["summary"]["A"]["median"] == 2.1
        md = render(report, "md")
        row = next(line for line in md.splitlines() if line.startswith("| longest pause of a stream"))
        assert [c.strip() for c in row.split("|")[1:-1]][2] == "FAILED" and "**" not in row
        assert "**B FAILED**" in md and "B lower in" not in md
    assert "2 ok, 1 failed" in render(
        build_report(make_dir(tmp_path / "failed", runs[:5] + [make_run("B", 2, 9.0, status="failed")])), "md"
    )


def test_a_serialised_run_is_not_a_win(tmp_path):
    serial = make_run("B", 0, 0.1)
    serial["warnings"] = ["serialised: the server ran the streams one at a time"]
    report = build_report(make_dir(tmp_path, [make_run("A", 0, 2.0), serial], repeat=1))
    (sc,) = report["scenarios"]
    assert sc["failed_arms"] == ["B"] and sc["runs"]["B"]["serialised"] == ["r00-sc-B"]
    md = render(report, "md")
    assert "0 ok, 1 serialised" in md and "serialised run(s)" in md and "**0.1" not in md


def test_threshold_and_baseline_change_the_report_not_the_data(tmp_path):
    runs = [make_run("A", 0, 0.6), make_run("B", 0, 0.4)]
    results = make_dir(tmp_path, runs, repeat=1)

    def paused(rep, arm):
        return next(m for m in rep["scenarios"][0]["metrics"] if m["key"] == "total_paused_s")["summary"][arm]["median"]

    assert paused(build_report(results), "A") == 0.6 and paused(build_report(results), "B") == 0.0
    assert paused(build_report(results, pause_threshold_s=0.3), "B") == 0.4
    rep = build_report(results, baseline="B")
    assert rep["baseline"] == "B" and "A" in rep["scenarios"][0]["metrics"][0]["vs_baseline"]


def test_differing_tokens_are_reported(tmp_path):
    runs = [make_run("A", 0, 1.0, ids=(1, 2, 3)), make_run("B", 0, 1.0, ids=(1, 5, 3))]
    md = render(build_report(make_dir(tmp_path, runs, repeat=1)), "md")
    assert (
        "Greedy tokens DIFFER in 1 of 2 request pairs; first: round 0 sc request s0: B differs from A at token 1" in md
    )


def test_csv_and_json_carry_the_same_numbers(tmp_path):
    report = build_report(make_dir(tmp_path, [make_run("A", 0, 2.0), make_run("B", 0, 1.0)], repeat=1))
    rows = render(report, "csv").strip().splitlines()
    pause_a = next(r for r in rows if r.startswith("sc,longest_pause_s,") and ",A," in r).split(",")
    assert pause_a[5:9] == ["1", "2.0", "2.0", "2.0"]
    assert json.loads(render(report, "json"))["scenarios"][0]["name"] == "sc"


def test_value_formatting():
    assert fmt_value(12.2345, "s") == "12.2" and fmt_value(0.01234, "s") == "0.0123"
    assert fmt_value(12345.6, "ms") == "12346" and fmt_value(None, "s") == "—"
    assert fmt_value(289.0, "tok") == "289" and fmt_value(12.16, "s", 4) == "12.16"


def test_joiner_labels_state_the_length_the_server_measured(tmp_path):
    runs = [make_run("A", 0, 1.0), make_run("B", 0, 1.0)]
    for run, measured in zip(runs, (100, 493)):  # B's server counted its text prompt in its own tokens
        run["requests"][1]["measured_prompt_tokens"] = measured
    md = render(build_report(make_dir(tmp_path, runs, repeat=1)), "md")
    assert "| the big prompt (100-493 tokens as the server counted): TTFT" in md
    same = [make_run("A", 0, 1.0)]
    same[0]["requests"][1]["measured_prompt_tokens"] = 100  # as asked: the label keeps its own wording
    assert "| the big prompt: TTFT" in render(build_report(make_dir(tmp_path / "same", same, repeat=1)), "md")
