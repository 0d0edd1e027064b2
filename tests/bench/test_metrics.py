"""Every metric on hand-made timelines (times in seconds since the run's start)."""

import pytest

from strata_bench.metrics import compute_metrics, metric_specs, pause_gaps, pauses_over, token_gaps


def req(name, role, times, sent=0.0, ended=None, ended_by="finished", error=None):
    return {
        "name": name,
        "role": role,
        "sent_at": sent,
        "token_times": list(times),
        "first_token_at": times[0] if times else None,
        "ended_at": ended if ended is not None else (times[-1] if times else sent),
        "ended_by": ended_by,
        "error": error,
    }


def run(*requests, time_scale=1.0, events=None):
    return {"requests": list(requests), "time_scale": time_scale, "engine_events": events}


def test_a_gap_exactly_at_the_threshold_is_not_a_pause():
    # gaps: 0.25, 0.5 (exactly at the threshold), 0.75 -> only 0.75 counts
    stream = req("s0", "stream", [0.0, 0.25, 0.75, 1.5])
    m = compute_metrics(run(stream), threshold_s=0.5)
    assert m["longest_pause_s"] == pytest.approx(0.75)
    assert m["total_paused_s"] == pytest.approx(0.75)


def test_a_stream_that_never_pauses():
    stream = req("s0", "stream", [i * 0.1 for i in range(11)])
    m = compute_metrics(run(stream))
    assert m["total_paused_s"] == 0.0
    assert m["longest_pause_s"] == pytest.approx(0.1)
    assert m["itl_p50_ms"] == pytest.approx(100.0)
    assert m["itl_max_ms"] == pytest.approx(100.0)


def test_total_paused_is_the_mean_over_streams():
    a = req("s0", "stream", [0, 1.0, 3.0])  # gaps 1, 2 -> 3
    b = req("s1", "stream", [0, 0.1, 0.2])  # never pauses -> 0
    m = compute_metrics(run(a, b))
    assert m["total_paused_s"] == pytest.approx(1.5)
    assert m["longest_pause_s"] == pytest.approx(2.0)


def test_open_gap_until_a_stream_is_closed_counts():
    # closed by the bench 3 s after its last token: still paused when it ended
    s = req("s0", "stream", [0, 0.1, 0.2], ended=3.2, ended_by="cancelled")
    assert pause_gaps(s) == pytest.approx([0.1, 0.1, 3.0])
    assert token_gaps(s) == pytest.approx([0.1, 0.1])
    assert compute_metrics(run(s))["longest_pause_s"] == pytest.approx(3.0)
    assert pauses_over(s, 0.5) == [(0.2, 3.2)]
    finished = req("s1", "stream", [0, 0.1], ended=9.0, ended_by="finished")
    assert pause_gaps(finished) == pytest.approx([0.1])


def test_packed_tokens_are_zero_gaps_not_small_ones():
    s = req("s0", "stream", [0.0, 0.0, 0.0, 0.3, 0.3, 0.3])
    m = compute_metrics(run(s))
    assert m["itl_p50_ms"] == 0.0 and m["itl_max_ms"] == pytest.approx(300.0)


def test_tokens_meanwhile_and_ttft():
    stream = req("s0", "stream", [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    j1 = req("j1", "joiner", [2.0, 2.1], sent=1.0)  # window opens at 1.0 (exclusive)
    j2 = req("j2", "joiner", [3.0], sent=1.5)  # window closes at 3.0 (inclusive)
    m = compute_metrics(run(stream, j1, j2))
    assert m["tokens_meanwhile"] == 4  # 1.5, 2.0, 2.5, 3.0
    assert m["ttft_s.j1"] == pytest.approx(1.0) and m["ttft_s.j2"] == pytest.approx(1.5)
    assert m["joiners_span_s"] == pytest.approx(2.0)  # j1 sent at 1.0, j2's first token at 3.0


def test_the_joiners_span_whatever_order_they_were_read_in():
    first_in_last_out = req("j1", "joiner", [3.5], sent=1.0)
    second_in_first_out = req("j2", "joiner", [2.0], sent=1.5)
    m = compute_metrics(run(req("s0", "stream", [0.5, 4.0]), first_in_last_out, second_in_first_out, time_scale=2.0))
    assert m["joiners_span_s"] == pytest.approx(5.0)  # (3.5 - 1.0) wall seconds, x2 modelled
    assert "joiners_span_s" not in compute_metrics(run(req("s0", "stream", [0, 1]), first_in_last_out))


def test_a_joiner_that_fails():
    stream = req("s0", "stream", [0.0, 1.0, 2.0, 3.0, 4.0])
    ok = req("j1", "joiner", [2.5], sent=0.5)
    failed = req("j2", "joiner", [], sent=1.0, ended=3.5, ended_by="error", error="HTTP 500: boom")
    m = compute_metrics(run(stream, ok, failed))
    assert m["ttft_s.j2"] is None
    assert m["ttft_s.j1"] == pytest.approx(2.0)
    assert m["tokens_meanwhile"] == 3  # the window ends where the failed joiner ended: 1.0, 2.0, 3.0
    assert m["joiners_span_s"] is None  # the failed joiner was never read to its first token


def test_token_rate_counts_every_token_over_first_send_to_last_token():
    a = req("s0", "stream", [1.0, 2.0, 3.0], sent=0.0)
    b = req("j", "joiner", [4.0], sent=0.5)
    assert compute_metrics(run(a, b))["token_rate"] == pytest.approx(4 / 4.0)


def test_time_scale_reports_modelled_seconds():
    s = req("s0", "stream", [0.0, 0.01, 0.11], sent=0.0)  # wall gaps 10 ms and 100 ms
    m = compute_metrics(run(s, time_scale=10.0), threshold_s=0.5)
    assert m["longest_pause_s"] == pytest.approx(1.0)
    assert m["total_paused_s"] == pytest.approx(1.0)  # 0.1 s (modelled) is under 0.5, 1.0 is over
    assert m["token_rate"] == pytest.approx(3 / 1.1)


def test_no_streams_only_ttft():
    j = req("j", "joiner", [1.0, 1.2, 1.4], sent=0.0)
    assert compute_metrics(run(j)) == {"ttft_s.j": 1.0}
    specs = metric_specs({"requests": [{"name": "j", "role": "joiner"}]}, has_events=False)
    assert [s.key for s in specs] == ["ttft_s.j"]


def test_engine_events_are_counted_only_when_exposed():
    events = [{"kind": "PIECE"}, {"kind": "PIECE"}, {"kind": "YIELDED"}, {"kind": "LEADIN"}]
    m = compute_metrics(run(req("s0", "stream", [0, 1]), events=events))
    assert (m["pieces"], m["give_ways"], m["lead_ins"], m["stops"]) == (2, 1, 1, 0)
    assert "pieces" not in compute_metrics(run(req("s0", "stream", [0, 1])))


def test_stream_without_tokens_is_left_out_and_nothing_crashes():
    m = compute_metrics(run(req("s0", "stream", [], ended_by="error", error="x")))
    assert m["longest_pause_s"] is None and m["total_paused_s"] is None and m["token_rate"] is None


def test_metric_rows_follow_the_scenario():
    scenario = {
        "requests": [{"name": "s0", "role": "stream"}, {"name": "big", "role": "joiner", "label": "the 64K prompt"}]
    }
    keys = [s.key for s in metric_specs(scenario, has_events=True)]
    assert keys[:4] == ["longest_pause_s", "total_paused_s", "tokens_meanwhile", "ttft_s.big"]
    assert "pieces" in keys
    labels = [s.label for s in metric_specs(scenario, has_events=False)]
    assert "the 64K prompt: TTFT" in labels and "read pieces" not in labels
    assert "joiners_span_s" not in keys  # one joiner: its span is its TTFT
    two = {"requests": scenario["requests"] + [{"name": "small", "role": "joiner"}]}
    keys = [s.key for s in metric_specs(two, has_events=False)]
    assert keys[3:6] == ["ttft_s.big", "ttft_s.small", "joiners_span_s"]


def test_stream_figures_count_from_the_anchor():
    # a 2 s gap during setup (another stream's read, before the anchor at 2.5) is not the join being measured
    stream = req("s0", "stream", [0.0, 2.0, 2.1, 2.2, 3.0, 3.1], sent=0.0)
    joiner = req("j", "joiner", [3.0], sent=2.5)
    r = {**run(stream, joiner), "anchor_at": 2.5, "id": "r00-x-a"}
    m = compute_metrics(r)
    assert m["longest_pause_s"] == pytest.approx(0.8) and m["total_paused_s"] == pytest.approx(0.8)
    assert m["itl_max_ms"] == pytest.approx(800.0)  # 2.2 -> 3.0 ends after the anchor: it counts
    assert m["token_rate"] == pytest.approx(3 / (3.1 - 2.5))  # tokens at 3.0, 3.0 (joiner), 3.1
    assert m["output_throughput"] == pytest.approx(7 / 3.1)  # every token, first send (0.0) to last token
    assert pauses_over(stream, 0.5, since=2.5) == [(2.2, 3.0)]
    assert compute_metrics({**r, "anchor_at": None})["longest_pause_s"] == pytest.approx(2.0)


def test_events_of_the_streams_own_reads_are_not_counted():
    events = [
        {"kind": "PIECE", "request_id": "r00-x-a-s0"},
        {"kind": "PIECE", "request_id": "r00-x-a-j"},
        {"kind": "LEADIN", "request_id": "r00-x-a-j"},
        {"kind": "YIELDED", "request_id": None},
    ]
    r = {**run(req("s0", "stream", [0, 1]), req("j", "joiner", [1], sent=0.5), events=events), "id": "r00-x-a"}
    m = compute_metrics(r)
    assert (m["pieces"], m["lead_ins"], m["give_ways"]) == (1, 1, 1)
