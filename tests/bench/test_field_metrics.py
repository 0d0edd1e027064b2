"""Field metrics: exact on hand-made records, and on the synthetic server's known schedule within its jitter."""

from __future__ import annotations

import pytest

from strata_bench.arms import Arm
from strata_bench.load.field_metrics import DEFINITIONS, SLO, run_metrics
from strata_bench.engines.http_stream import run as run_stamped
from strata_bench.load import LoadShape
from strata_bench.load.runner import LoadConfig, drive_load
from strata_bench.load.workload import LengthSpec, Workload


def record(sent, chunks, tokens_per_chunk=1, end_after=0.0, **extra):
    times = [t for t in chunks for _ in range(tokens_per_chunk)]
    return {
        "name": "q",
        "sent_at": sent,
        "first_token_at": chunks[0],
        "ended_at": chunks[-1] + end_after,
        "ended_by": "finished",
        "error": None,
        "token_times": times,
        "chunk_times": list(chunks),
        "output_tokens": len(times),
        "input_tokens": 10,
        **extra,
    }


def test_definitions_on_known_times():
    # request A: sent 0, tokens at 1.0, 1.1, 1.2, 1.5 -> TTFT 1.0, latency 1.5, TPOT 0.5/3
    # request B: sent 0.5, tokens at 0.7, 0.9 -> TTFT 0.2, latency 0.4, TPOT 0.2
    a, b = record(0.0, [1.0, 1.1, 1.2, 1.5]), record(0.5, [0.7, 0.9])
    m = run_metrics([a, b])
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["ttft_ms"]["mean"] == pytest.approx(600.0)
    assert m["ttft_ms"]["p50"] == pytest.approx(600.0)  # numpy's linear interpolation between 200 and 1000
    assert m["latency_ms"]["max"] == pytest.approx(1500.0)
    assert sorted([m["tpot_ms"]["min"], m["tpot_ms"]["max"]]) == pytest.approx([500 / 3, 200.0])
    # pooled gaps: 100, 100, 300 (A) and 200 (B): four gaps, not two averages
    assert m["itl_ms"]["n"] == 4 and m["itl_ms"]["p50"] == pytest.approx(150.0)
    assert m["duration_s"] == pytest.approx(1.5)  # first send 0 to last end 1.5
    assert m["output_throughput"] == pytest.approx(6 / 1.5)
    assert m["request_throughput"] == pytest.approx(2 / 1.5)


def test_packed_events_are_one_gap_and_tpot_counts_tokens():
    m = run_metrics([record(0.0, [1.0, 2.0, 3.0], tokens_per_chunk=4)])
    assert m["output_tokens_total"] == 12
    assert m["itl_ms"]["n"] == 2 and m["itl_ms"]["p50"] == pytest.approx(1000.0)
    assert m["tpot_ms"]["p50"] == pytest.approx(2000.0 / 11)


def test_failed_and_one_token_requests():
    bad = record(0.0, [0.5, 0.6], ended_by="error", error="HTTP 500")
    single = record(0.0, [0.4])
    m = run_metrics([record(0.0, [1.0, 2.0]), bad, single])
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["tpot_ms"]["n"] == 1  # a one-token request has no TPOT
    assert m["ttft_ms"]["n"] == 2


def test_goodput_counts_requests_meeting_every_slo():
    fast, slow_first, slow_tokens = record(0.0, [0.1, 0.2]), record(0.0, [0.9, 1.0]), record(0.0, [0.1, 1.1])
    m = run_metrics([fast, slow_first, slow_tokens], SLO(ttft_ms=500, tpot_ms=500))
    assert m["good_requests"] == 1
    assert m["goodput"] == pytest.approx(1 / 1.1)
    assert "goodput" not in run_metrics([fast])
    with pytest.raises(ValueError, match="ttft_ms"):
        SLO(ttft_ms=0)


def test_every_reported_figure_has_a_one_line_definition():
    m = run_metrics([record(0.0, [1.0, 2.0])], SLO(latency_ms=10_000))
    for key in (
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "latency_ms",
        "duration_s",
        "request_throughput",
        "output_throughput",
        "goodput",
        "output_tokens",
        "per_user_tps",
    ):
        assert key in m and "\n" not in DEFINITIONS[key]


def _drive(url, output_tokens, concurrency, requests, keepalive=False):
    config = LoadConfig(
        arms=(Arm("s", url=url),),
        points=(LoadShape("closed", concurrency=concurrency, requests=requests),),
        workload=Workload(LengthSpec.parse("100"), LengthSpec.parse(str(output_tokens))),
        keepalive=keepalive,
    )
    return run_stamped(drive_load(url, config.points[0], config, "t"))


def test_metrics_on_the_synthetic_schedule(synthetic):
    # free mode: a 100-token read at 2 ms/token (reads go one at a time), then a token every 60 ms, 3 per event.
    itl, pack, tokens = 0.060, 3, 12
    url = synthetic("--itl-ms", "60", "--pack", "3", "--read-ms-per-token", "2", "--mode", "free")
    run = _drive(url, tokens, concurrency=2, requests=4)
    m = run_metrics(run["requests"])
    assert m["completed"] == 4 and m["output_tokens_total"] == 4 * tokens
    assert run["max_in_flight"] == 2
    # the schedule: events every pack*itl, so (tokens/pack - 1) gaps per request, each pack*itl long
    assert m["itl_ms"]["n"] == 4 * (tokens // pack - 1)
    jitter = itl / 2  # the client's and server's scheduling delay, bounded well below one gap
    assert m["itl_ms"]["p50"] == pytest.approx(pack * itl * 1000, abs=jitter * 1000)
    # TPOT = (latency - TTFT) / (tokens - 1) = (tokens - pack) * itl / (tokens - 1): 9 token times of 60 ms over 11
    assert m["tpot_ms"]["p50"] == pytest.approx((tokens - pack) * itl / (tokens - 1) * 1000, abs=jitter * 1000)
    # TTFT: never below the 200 ms read plus one event (pack*itl), the schedule's floor (no upper bound: a
    # request can wait for another's read, and connecting on a loaded machine takes what it takes)
    assert m["ttft_ms"]["min"] >= (0.2 + pack * itl) * 1000
    for r in run["requests"]:
        assert r["first_token_at"] == r["chunk_times"][0]
        latency = r["ended_at"] - r["sent_at"]
        assert latency == pytest.approx((r["first_token_at"] - r["sent_at"]) + (tokens - pack) * itl, abs=jitter)
    assert m["output_throughput"] == pytest.approx(m["output_tokens_total"] / m["duration_s"])


def test_keepalive_reuses_one_connection_per_worker_and_reads_every_response_whole(synthetic):
    url = synthetic("--itl-ms", "5", "--read-ms-per-token", "0.01")
    kept = _drive(url, 6, concurrency=1, requests=5, keepalive=True)
    fresh = _drive(url, 6, concurrency=1, requests=5, keepalive=False)
    assert kept["connections_opened"] == 1 and fresh["connections_opened"] == 5
    assert [r["reused_connection"] for r in kept["requests"]] == [False, True, True, True, True]
    assert not any(r["reused_connection"] for r in fresh["requests"])
    for run in (kept, fresh):
        assert all(r["error"] is None and r["output_tokens"] == 6 and not r["warnings"] for r in run["requests"])


def test_input_tokens_are_the_servers_count_where_it_gave_one():
    # text prompts are words: a byte-level server counts several tokens a word, and says so in usage
    counted = record(0.0, [1.0, 2.0], usage={"prompt_tokens": 37, "completion_tokens": 2})
    m = run_metrics([counted, record(0.0, [1.0, 2.0])])
    assert m["input_tokens"] == 37 + 10
    assert m["input_tokens_per_request"]["max"] == 37 and m["input_tokens_per_request"]["min"] == 10
