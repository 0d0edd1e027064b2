"""End to end on the real engine: two arms (release, pieces) through run, report and plot by the console script.

CPU, two stages, two groups, the embedded default model, two_joiners at a tiny scale.
"""

import json

import pytest

from .conftest import bench

ENGINE = "strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 64 --ctx 4096"


@pytest.mark.slow
def test_two_real_engine_arms_run_report_plot(tmp_path):
    out = tmp_path / "e2e"
    r = bench(
        "run",
        "--arm",
        f"release={ENGINE}",
        "--arm",
        f"pieces=env STRATA_PIPED_READ_PIECE=128 {ENGINE}",
        "--scenarios",
        "two_joiners",
        "--scale",
        "0.015625",
        "--repeat",
        "1",
        "--out",
        str(out),
        "--health-timeout",
        "300",
        "--run-timeout",
        "600",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    runs = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert set(runs) == {"r00-two_joiners-release", "r00-two_joiners-pieces"}
    assert all(run["status"] == "ok" for run in runs.values()), {k: v.get("failure") for k, v in runs.items()}
    pieces = runs["r00-two_joiners-pieces"]
    assert pieces["server"]["engine"]["piped_read_piece"] == 128 and pieces["prompt_mode"] == "ids"
    assert any(e["kind"] == "PIECE" for e in pieces["engine_events"])
    assert not any(e["kind"] == "PIECE" for e in runs["r00-two_joiners-release"]["engine_events"])

    report = json.loads(bench("report", str(out), "--format", "json").stdout)
    (scenario,) = report["scenarios"]
    keys = [m["key"] for m in scenario["metrics"]]
    assert keys[:5] == ["longest_pause_s", "total_paused_s", "tokens_meanwhile", "ttft_s.join64k", "ttft_s.join32k"]
    for metric in scenario["metrics"][:6]:
        assert metric["summary"]["release"] is not None and metric["summary"]["pieces"] is not None, metric["key"]
    assert report["tokens"]["equal"], report["tokens"]["summary"]  # greedy: pieces change no token

    md = bench("report", str(out)).stdout
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert [c.strip() for c in table[0].split("|")[1:-1]] == ["", "release", "pieces"]
    assert any(line.startswith("| longest pause of a stream") for line in table)

    plot = bench("plot", str(out))
    assert plot.returncode == 0, plot.stderr
    assert (out / "plots" / "two_joiners-r00-arms.png").read_bytes()[:4] == b"\x89PNG"
