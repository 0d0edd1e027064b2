"""`strata-bench load` / `load-report` as console scripts: bad input, an A/B sweep on synthetic arms, re-rendering."""

import json

import pytest

from strata_bench.engines.launcher import free_port

from .conftest import assert_usage_errors, bench

FAST = "python -m strata_bench.synthetic --port {port} --itl-ms 5 --read-ms-per-token 0.05 --mode free"
SLOW = "python -m strata_bench.synthetic --port {port} --itl-ms 15 --read-ms-per-token 0.05 --mode free"


def test_load_bad_input_is_a_usage_error_naming_it(tmp_path):
    out = tmp_path / "never"
    cases = [
        (["--arm", f"a={FAST}", "--requests", "3"], "--concurrency (closed loops) or --rate"),
        (["--arm", f"a={FAST}", "--concurrency", "2", "--rate", "1", "--requests", "3"], "one of them"),
        (["--arm", f"a={FAST}", "--concurrency", "2"], "must stop"),
        (["--arm", f"a={FAST}", "--concurrency", "two", "--requests", "3"], "--concurrency 'two'"),
        (["--arm", f"a={FAST}", "--concurrency", "2", "--requests", "3", "--input-len", "uniform:9"], "--input-len"),
        (["--arm", f"a={FAST}", "--arm", f"a={FAST}", "--concurrency", "1", "--requests", "3"], "unique"),
        (["--arm", f"a=@http://127.0.0.1:{free_port()}", "--concurrency", "1", "--requests", "3"], "does not answer"),
    ]
    assert_usage_errors("load", cases, out)
    r = bench("load-report", str(tmp_path))
    assert r.returncode == 2 and "not a bench directory" in r.stderr


@pytest.mark.slow  # a sweep of six runs on subprocess servers: ~20 s
def test_load_sweep_ab_on_synthetic_arms(tmp_path):
    out = tmp_path / "sweep"
    r = bench(
        "load",
        "--arm",
        f"fast={FAST}",
        "--arm",
        f"slow={SLOW}",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--input-len",
        "uniform:20:40",
        "--output-len",
        "8",
        "--repeat",
        "2",
        "--keepalive",
        "--slo-tpot-ms",
        "10",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    # round-major, arms reversed every round: ABBA pairs at every sweep point
    assert meta["plan"] == [
        "r00-c1-fast",
        "r00-c1-slow",
        "r00-c2-fast",
        "r00-c2-slow",
        "r01-c1-slow",
        "r01-c1-fast",
        "r01-c2-slow",
        "r01-c2-fast",
    ]
    run = json.loads((out / "runs" / "r00-c2-slow.json").read_text())
    assert run["status"] == "ok" and run["max_in_flight"] == 2 and run["connections_opened"] == 2
    assert [q["index"] for q in run["requests"]] == [0, 1, 2, 3]
    assert all(q["output_tokens"] == 8 and len(q["chunk_times"]) == 8 for q in run["requests"])
    fast = json.loads((out / "runs" / "r01-c2-fast.json").read_text())
    # the same seed gives both arms and both rounds the same requests
    assert [q["prompt_sha256"] for q in fast["requests"]] == [q["prompt_sha256"] for q in run["requests"]]
    text = (out / "report.md").read_text()
    for words in (
        "## Sweep",
        "TTFT p50 ms",
        "TPOT p50 ms",
        "ITL (pooled gaps) p99 ms",
        "goodput req/s",
        "## Percentiles: fast at c1",
        "## Paired by round against fast",
        "c2 TPOT p50 ms: slow lower in",
        "## Definitions",
        "- TPOT: (request latency - TTFT) / (output tokens - 1)",
        "connections: kept alive",
    ):
        assert words in text, words
    # the slow arm's TPOT (15 ms) misses the 10 ms SLO: its goodput row is 0, the fast arm's is not
    report = json.loads(bench("load-report", str(out), "--format", "json").stdout)
    goodput = next(c for c in report["points"][0]["columns"] if c["key"] == "goodput")
    assert goodput["summary"]["slow"]["median"] == 0 and goodput["summary"]["fast"]["median"] > 0
    tpot = next(c for c in report["points"][0]["columns"] if c["key"] == "tpot_ms.p50")
    assert tpot["vs_baseline"]["slow"]["higher"] == 2  # slower in both pairs
    assert (out / "sweep.png").stat().st_size > 10_000
    # re-rendered from the JSON alone, with another SLO
    again = bench("load-report", str(out), "--slo-tpot-ms", "100", "--plot", str(tmp_path / "p.png"))
    assert again.returncode == 0 and "TPOT <= 100 ms" in again.stdout and (tmp_path / "p.png").exists()


def test_open_loop_by_duration_on_a_url_arm(tmp_path, synthetic):
    url = synthetic("--itl-ms", "5", "--read-ms-per-token", "0.05", "--mode", "free")
    out = tmp_path / "open"
    r = bench(
        "load",
        "--arm",
        f"syn=@{url}",
        "--rate",
        "20",
        "--arrivals",
        "constant",
        "--duration",
        "0.5",
        "--output-len",
        "4",
        "--input-len",
        "16",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "runs" / "r00-rate20-syn.json").read_text())
    assert run["issued"] == 10 and [q["scheduled_at"] for q in run["requests"]] == [i / 20 for i in range(10)]
    assert all(q["sent_at"] >= q["scheduled_at"] for q in run["requests"])
    assert "## Percentiles: syn at rate20" in r.stdout
