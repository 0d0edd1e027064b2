"""The interleave check's "one request at a time" verdict from facts (interleave/concurrency.py): the engine's own
counters or a stream that ended before the other began; never from how many tokens one stream got first, and
never from a failed request. Unit tests on made-up streams, then the console script against the synthetic
engine with a starved front end (the old token-count rule called it serial), a serial engine, and no counters."""

from __future__ import annotations

import json
import re

from strata_verify.client import Completion
from strata_verify.interleave.concurrency import CLIENT_PROOF_TOKENS, ConcurrencyWatch, CounterReader, metric_sum

from .support import SCALE, fake, verify

VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %s
vllm:num_requests_waiting{engine="0",model_name="m"} %s
"""


def stream(name, sent=0.0, times=(), ended=None, by=None, error=None):
    c = Completion(name=name, request_id=f"rid-{name}", sent_at=sent, times=list(times), token_ids=[1] * len(times))
    c.ended_at, c.ended_by, c.error = ended, by, error
    if by == "finished":
        c.finish_reason = "length"
    return c


def reader(bodies, family="vllm"):
    """A CounterReader over a list of /metrics bodies, one per read (the last repeats)."""
    seen = []

    def get(path):
        if path != "/metrics":
            return 404, ""
        body = bodies[min(len(seen), len(bodies) - 1)]
        seen.append(body)
        return (200, body) if body is not None else (404, "")

    return CounterReader("http://unused", family, get=get)


def rel(t):
    return "n/a" if t is None else f"+{t:.3f} s"


def drive(watch, a, b, reads, start=0.0, step=0.3, grow=None):
    """Observe `reads` times, POLL apart; `grow(i)` may add tokens to the streams between reads."""
    for i in range(reads):
        if grow:
            grow(i)
        reason = watch.observe(a, b, now=start + i * step)
        if reason:
            return reason
    return None


def test_metric_sum_reads_labelled_samples_and_says_none_when_absent():
    body = VLLM_METRICS % (2, 0) + 'vllm:num_requests_running{engine="1",model_name="m"} 1\n'
    assert metric_sum(body, ("vllm:num_requests_running",)) == 3.0
    assert metric_sum(body, ("vllm:num_requests_waiting",)) == 0.0
    assert metric_sum(body, ("strata_requests_running",)) is None


def test_two_running_proves_concurrency_however_many_tokens_one_stream_got_first():
    a, b = stream("A", times=[0.1 + 0.001 * i for i in range(900)]), stream("B", sent=0.05)
    watch = ConcurrencyWatch(reader([VLLM_METRICS % (2, 0)]), rel, serial_window=1.0)
    assert drive(watch, a, b, 20) is None  # 900 tokens before B's first: the old rule said "serial"
    assert watch.concurrent.startswith("the engine's counters (GET /metrics vllm:num_requests_running")
    assert "2 running" in watch.concurrent
    assert any("engine counters: GET /metrics" in line for line in watch.describe())


def test_counters_saying_one_running_one_waiting_for_the_window_while_a_streams_prove_serial():
    a, b = stream("A", times=[0.1]), stream("B", sent=0.05)

    def grow(_i):
        a.times.extend([a.times[-1] + 0.01] * 10)

    watch = ConcurrencyWatch(reader([VLLM_METRICS % (1, 1)]), rel, serial_window=2.0)
    reason = drive(watch, a, b, 30, grow=grow)
    assert reason is not None and "the engine's counters" in reason and "1 running and 1 waiting" in reason
    assert "one request at a time" in reason
    # the same counters without progress (the engine stalled, not serial) prove nothing
    a2, b2 = stream("A", times=[0.1]), stream("B", sent=0.05)
    assert drive(ConcurrencyWatch(reader([VLLM_METRICS % (1, 1)]), rel, serial_window=2.0), a2, b2, 30) is None


def test_a_waiting_count_that_clears_restarts_the_window_and_two_running_once_vetoes_it():
    a, b = stream("A", times=[0.1]), stream("B", sent=0.05)
    bodies = [VLLM_METRICS % (1, 1)] * 5 + [VLLM_METRICS % (2, 0)] + [VLLM_METRICS % (1, 1)] * 40

    def grow(_i):
        a.times.extend([a.times[-1] + 0.01] * 10)

    watch = ConcurrencyWatch(reader(bodies), rel, serial_window=2.0)
    assert drive(watch, a, b, 46, grow=grow) is None
    assert "2 running" in watch.concurrent


def test_without_counters_token_counts_are_never_enough_but_an_ended_stream_is():
    a, b = stream("A", times=[0.1 + 0.001 * i for i in range(5000)]), stream("B", sent=0.05)
    watch = ConcurrencyWatch(reader([None]), rel)
    assert drive(watch, a, b, 50) is None
    assert watch.reader.available is False
    assert "engine counters: none" in "\n".join(watch.describe())
    a.ended_at, a.ended_by, a.finish_reason = 5.2, "finished", "length"
    reason = watch.observe(a, b, now=6.0)
    assert reason.startswith("the client's clock: A ended (length, 5000 tokens") and "before B had a token" in reason


def test_a_short_stream_that_ended_first_or_a_failed_one_is_no_evidence():
    b = stream("B", sent=0.05)
    few = stream("A", times=[0.1] * (CLIENT_PROOF_TOKENS - 1), ended=0.2, by="finished")
    assert ConcurrencyWatch(None, rel).observe(few, b, now=1.0) is None
    failed = stream("A", times=[0.1] * 5000, ended=0.9, by="error", error="HTTP 500: out of memory")
    assert ConcurrencyWatch(None, rel).observe(failed, b, now=1.0) is None


def test_llama_server_slots_show_concurrency_but_never_serial():
    def get(path):
        if path == "/slots":
            return 200, json.dumps([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": True}])
        return 404, ""

    a, b = stream("A", times=[0.1]), stream("B", sent=0.05)
    watch = ConcurrencyWatch(CounterReader("http://unused", "llama.cpp", get=get), rel)
    assert watch.observe(a, b, now=0.5) is None
    assert "GET /slots is_processing" in watch.concurrent


# -- the console script against the synthetic engine ------------------------------------------------------
def _a_tokens_before_b(raw):
    """Tokens one stream got after the other was sent and before the other's first token. Either may be the one
    held: the fake holds whichever reaches it second, and A's and B's threads race to send."""

    def before(x, y):
        return sum(1 for t in x["times"] if y["sent_at"] <= t < y["times"][0])

    a, b = raw["interleaved"]["A"], raw["interleaved"]["B"]
    return max(before(a, b), before(b, a))


def test_a_starved_front_end_is_not_called_serial(tmp_path):
    """The engine runs both; B's first token reaches the client 3 s late. The old rule (256 tokens of A after B's
    send, none of B) called that one at a time; the counters show two running, the gate waits and passes."""
    for extra, evidence in (
        (("--decode-ms", "2"), "the engine's counters (GET /metrics strata_requests_running"),
        (("--decode-ms", "2", "--no-metrics"), "the client's clock: A and B both received"),
    ):
        out = tmp_path / "run.json"
        result = verify(
            "interleave", "--scale", SCALE, "--engine", fake("--stall-second-ms", "3000", *extra), "--json", str(out)
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"concurrency shown by {evidence}" in result.stdout
        assert _a_tokens_before_b(json.loads(out.read_text())["raw"]) >= 256  # what the old rule took for serial


def test_a_serial_engine_is_not_exercised_from_its_counters():
    result = verify("interleave", "--scale", SCALE, "--serial-window", "1", "--engine", fake("--serial"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[NOT EXERCISED] interleave: A and B decode: the engine's counters (GET /metrics" in result.stdout
    assert "1 running and 1 waiting" in result.stdout and "one request at a time" in result.stdout


def test_a_serial_engine_without_counters_is_not_exercised_once_a_ended_before_b_began():
    result = verify(
        "interleave",
        "--scale",
        SCALE,
        "--engine",
        fake("--serial", "--no-metrics", "--ctx", "2400", "--decode-ms", "0.5"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    # the serial fake serves whichever of A and B reaches it first
    assert re.search(r"A and B decode: the client's clock: (A|B) ended \(length", result.stdout), result.stdout
    assert "engine counters: none" in result.stdout
