"""The per-run request timeline (`strata-bench report --requests`): known runs in, known cells out."""

import pytest
from click.testing import CliRunner

from strata_bench.cli import main
from strata_bench.timeline import render_timeline_md, request_timeline

from .test_report import make_dir, make_run


def test_each_run_gives_each_joiner_its_sent_and_first_token_times(tmp_path):
    slow = make_run("B", 0, 2.0)
    slow["time_scale"] = 2.0  # a run made at a time scale is shown in modelled seconds, as the tables are
    failed = make_run("A", 1, 0.3, status="failed")
    errored = make_run("B", 1, 0.3)
    errored["requests"][1]["error"] = "HTTP 500"
    results = make_dir(tmp_path, [make_run("A", 0, 0.3), slow, failed, errored], repeat=2)
    timeline = request_timeline(results, "sc")
    assert timeline["joiners"] == {"big": 100}
    first = timeline["runs"][0]["requests"]["big"]
    assert first["sent_s"] == pytest.approx(0.05) and first["ttft_s"] == pytest.approx(0.35)
    assert timeline["runs"][1]["requests"]["big"]["first_token_s"] == pytest.approx(4.2)
    text = render_timeline_md(timeline)
    assert "| 0 | A | 0.050 → 0.400 (0.350) |" in text
    assert "| 0 | B | 0.100 → 4.200 (4.100) |" in text
    assert "| 1 | A (failed) | not sent |" in text
    assert "| 1 | B | error: HTTP 500 |" in text
    assert "big (100 tokens)" in text


def test_an_unknown_scenario_is_named_with_the_ones_there_are(tmp_path):
    results = make_dir(tmp_path, [make_run("A", 0, 0.3)], repeat=1)
    out = CliRunner().invoke(main, ["report", str(results.path), "--requests", "nope"])
    assert out.exit_code == 2
    assert "scenario 'nope' is not in this bench; scenarios: sc" in out.output
    out = CliRunner().invoke(main, ["report", str(results.path), "--requests", "sc"])
    assert out.exit_code == 0 and "| 0 | A | 0.050 → 0.400 (0.350) |" in out.output
