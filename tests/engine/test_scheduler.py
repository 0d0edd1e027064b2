"""The scheduler's three read behaviours over the simulated executor on a fake clock, at the spec's
full sizes (64K / 32K prompts), in milliseconds of wall time. Bounds come from the run's own
events (piece times, budgets), never from wall-clock thresholds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakes.scheduler import PIPED, Harness, K, longest_stream_gap, stop_streams_after, streams
from strata_engine.scheduler.request import Phase


def test_pieces_bound_every_pause_by_one_piece_plus_one_budget():
    h = Harness(**PIPED, piped_read_piece=16 * K)
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    h.add("join32k", 32 * K, max_tokens=8, at=6.0)
    stop_streams_after(h, names, "join32k")
    h.run()
    pieces = h.events_of("PIECE", "join64k") + h.events_of("PIECE", "join32k")
    assert [e.fields["tokens"] for e in pieces] == [16 * K] * 6
    longest_piece = max(e.fields["read_ms"] for e in pieces) / 1000
    one_budget = h.config.decode_max_ms / 1000 + 0.05  # a budget ends with a drain: up to one round more
    gap = longest_stream_gap(h, names, since=2.0)
    assert longest_piece < gap <= longest_piece + one_budget
    assert all(r.finish_reason in ("length", "cancelled") for r in h.sink.finished)
    assert not h.events_of("YIELDED")


def test_release_pauses_the_streams_for_the_whole_read():
    h = Harness(**PIPED)  # piece unset: one run
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    stop_streams_after(h, names, "join64k")
    h.run()
    reads = [c for c in h.executor.calls if c[0] == "read" and c[1] == "join64k"]
    assert len(reads) == 1 and reads[0][2][0] == (0, 512) and reads[0][2][-1] == (64 * K - 512, 64 * K)
    read_ms = h.events_of("READ_DONE", "join64k")[0].fields["read_ms"]
    assert longest_stream_gap(h, names, since=2.0) >= read_ms / 1000
    assert not h.events_of("PIECE") and not h.events_of("LEADIN")


def test_release_back_to_back_reads_pause_for_both_and_never_give_way():
    h = Harness(**{**PIPED, "batch": 8})  # a slot for everyone: only the reads make anyone wait
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    h.add("short", 100, max_tokens=4, at=3.0)  # under half as long, but release never yields
    h.add("join32k", 32 * K, max_tokens=8, at=4.0)
    stop_streams_after(h, names, "join32k")
    h.run()
    assert not h.events_of("YIELDED")
    done = {e.request_id: e.t for e in h.events_of("READ_DONE")}
    assert done["join64k"] < done["short"] < done["join32k"]
    total_read = sum(h.events_of("READ_DONE", r)[0].fields["read_ms"] for r in ("join64k", "short", "join32k")) / 1000
    assert longest_stream_gap(h, names, since=2.0) >= total_read


@pytest.mark.parametrize("piece, chunk", [(16 * K, 512), (1000, 512), (100, 512), (64 * K, 512), (3000, 1000)])
def test_pieces_are_whole_chunks_and_at_most_32(piece, chunk):
    h = Harness(**{**PIPED, "prefill_chunk": chunk}, piped_read_piece=piece)
    h.add("long", 40_000, max_tokens=2)
    h.run()
    reads = [c[2] for c in h.executor.calls if c[0] == "read"]
    expected_chunks = min(max((2 * piece + chunk) // (2 * chunk), 1), 32)
    assert all(len(r) == expected_chunks for r in reads[:-1]) and 1 <= len(reads[-1]) <= expected_chunks
    assert all(end - start == chunk for r in reads for start, end in r if end != 40_000)
    positions = [p for r in reads for start, end in r for p in (start, end)]
    assert positions[0] == 0 and positions[-1] == 40_000 and positions == sorted(positions)


def test_give_way_happens_at_the_first_piece_end_after_the_short_request_arrives():
    h = Harness(**PIPED, piped_read_piece=16 * K)
    names = streams(h, 2)
    h.add("D", 40_000, max_tokens=4, at=1.0)
    h.add("E", 200, max_tokens=4, at=4.0)  # arrives while D's second piece is being read (checked below)
    stop_streams_after(h, names, "D")
    h.run()
    pieces = h.events_of("PIECE", "D")
    yielded = h.events_of("YIELDED")
    assert len(yielded) == 1
    y = yielded[0]
    e_arrival = h.requests["E"].arrival
    ends_after_arrival = [p for p in pieces if p.t >= e_arrival]
    assert pieces[0].t < e_arrival < pieces[1].t - pieces[1].fields["read_ms"] / 2000  # mid-piece, by a margin
    assert y.t == ends_after_arrival[0].t  # the first piece end after E arrived
    assert (y.slot, y.fields["tokens_read"], y.fields["to"]) == (h.requests["D"].slot, 2 * 16 * K, "E")
    assert ends_after_arrival[0].fields["decode_ms"] == 0.0  # the give-way comes before the budget
    admit_e = h.events_of("ADMIT", "E")[0]
    assert admit_e.t >= y.t and admit_e.slot != y.slot  # D keeps its slot and KV; E takes another
    resume = h.events_of("RESUME", "D")[0]
    assert resume.t >= h.events_of("READ_DONE", "E")[0].t and resume.fields["tokens_read"] == 2 * 16 * K
    d_reads = [c[2] for c in h.executor.calls if c[0] == "read" and c[1] == "D"]
    assert [p for r in d_reads for p in r] == [
        (s, min(s + 512, 40_000)) for s in range(0, 40_000, 512)
    ]  # nothing re-read
    assert h.sink.tokens["D"] and [t for _, t in h.sink.tokens["D"]] == h.solo_tokens("D", 4)


def test_short_request_that_is_not_short_enough_waits():
    h = Harness(**PIPED, piped_read_piece=8 * K)
    h.add("long", 40_000, max_tokens=2)
    h.add("half", 20_000, max_tokens=2, at=0.5)  # exactly half: not under half
    h.run()
    assert not h.events_of("YIELDED")
    assert h.events_of("ADMIT", "half")[0].t >= h.events_of("READ_DONE", "long")[0].t


def test_give_way_needs_a_free_slot():
    h = Harness(**{**PIPED, "batch": 2}, piped_read_piece=8 * K)
    h.add("stream0", 64, max_tokens=1_000_000)
    h.add("long", 40_000, max_tokens=2, at=0.5)
    h.add("short", 100, max_tokens=2, at=1.0)
    stop_streams_after(h, ["stream0"], "short")
    h.run()
    assert not h.events_of("YIELDED")
    assert h.events_of("ADMIT", "short")[0].t >= h.events_of("FINISH", "long")[0].t


def test_cancelled_read_frees_its_slot_at_the_next_piece_end():
    h = Harness(**{**PIPED, "batch": 3, "batch_groups": 2}, piped_read_piece=16 * K)
    h.add("stream0", 64, max_tokens=1_000_000)
    h.add("stream1", 64, max_tokens=1_000_000)
    h.add("C", 64 * K, max_tokens=4, at=1.0)
    h.add("next", 32 * K, max_tokens=4, at=1.1)  # waits: no slot free while C holds the last one
    h.cancel_at(4.0, "C")  # mid second piece (pieces end ~3.2 and ~5.0)
    stop_streams_after(h, ["stream0", "stream1"], "next")
    h.run()
    bstop = h.events_of("BSTOP", "C")[0]
    pieces_before = [p for p in h.events_of("PIECE", "C") if p.t <= bstop.t]
    assert bstop.t == pieces_before[-1].t and pieces_before[-2].t < 4.0 <= pieces_before[-1].t
    assert bstop.fields["tokens_read"] == len(pieces_before) * 16 * K < 64 * K
    c = h.requests["C"]
    assert c.finish_reason == "cancelled" and ("free", c.slot, None) in h.executor.calls
    assert h.events_of("ADMIT", "next")[0].slot == c.slot
    assert not h.sink.tokens.get("C")


def test_nothing_decoding_and_no_one_waiting_spends_no_budget():
    h = Harness(**PIPED, piped_read_piece=8 * K)
    h.add("alone", 45 * K, max_tokens=1)
    h.run()
    assert h.executor.kinds().count("decode") == 0
    pieces = h.events_of("PIECE", "alone")
    assert len(pieces) == 6 and all(p.fields["decode_ms"] == 0.0 for p in pieces)
    assert not h.events_of("LEADIN")


def test_lead_in_before_a_read_that_follows_a_read():
    h = Harness(**PIPED, piped_read_piece=16 * K)
    names = streams(h, 2)
    h.add("first", 20 * K, max_tokens=2, at=1.0)
    h.add("second", 20 * K, max_tokens=2, at=1.5)  # waits for first: starts right after it
    stop_streams_after(h, names, "second")
    h.run()
    lead_ins = h.events_of("LEADIN", "second")
    assert len(lead_ins) == 1
    assert lead_ins[0].t > h.events_of("READ_DONE", "first")[0].t
    assert lead_ins[0].fields["decode_tokens"] > 0
    last_piece_ms = h.events_of("PIECE", "first")[-1].fields["read_ms"]
    assert lead_ins[0].fields["budget_ms"] == pytest.approx(min(max(0.5 * last_piece_ms, 20.0), 400.0))
    assert not h.events_of("LEADIN", "first")  # it started after the streams decoded, not after a read


def test_no_lead_in_without_decoding_slots():
    h = Harness(**PIPED, piped_read_piece=16 * K)
    h.add("first", 20 * K, max_tokens=1)
    h.add("second", 20 * K, max_tokens=1)
    h.run()
    assert not h.events_of("LEADIN") and "decode" not in h.executor.kinds()


def test_single_group_decodes_between_chunks_for_the_share_of_each_chunk():
    h = Harness(batch=4, batch_groups=1, num_stages=1, prefill_chunk=512, ctx=64 * K, decode_share=0.5)
    h.add("stream0", 64, max_tokens=1_000_000)
    h.add("long", 4096, max_tokens=2, at=0.5)
    stop_streams_after(h, ["stream0"], "long")
    h.run()
    calls = h.executor.calls
    reads = [i for i, c in enumerate(calls) if c[0] == "read" and c[1] == "long"]
    assert len(reads) == 8 and all(len(calls[i][2]) == 1 for i in reads)
    for i in reads[:-1]:  # after every chunk but the last: a decode of share x that chunk's time, no cap or floor
        kind, _, budget = calls[i + 1]
        assert kind == "decode" and budget == pytest.approx(0.5 * h.executor.results[i].ms)
    assert not h.events_of("PIECE")


def test_single_group_gives_way_at_a_chunk_boundary():
    h = Harness(batch=4, batch_groups=1, num_stages=1, prefill_chunk=512, ctx=64 * K)
    h.add("long", 8192, max_tokens=2)
    h.add("short", 100, max_tokens=2, at=0.3)
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.fields["to"] == "short" and y.fields["tokens_read"] % 512 == 0 and 0 < y.fields["tokens_read"] < 8192
    assert h.requests["long"].finish_reason == "length"


def test_continuous_batching_admits_in_fifo_order_and_completes_everyone():
    h = Harness(batch=3, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=8192)
    for i in range(10):
        h.add(f"r{i}", 50 + 37 * i, max_tokens=5 + i)
    h.run()
    assert [e.request_id for e in h.events_of("ADMIT")] == [f"r{i}" for i in range(10)]
    for i in range(10):
        r = h.requests[f"r{i}"]
        assert r.phase is Phase.FINISHED and r.finish_reason == "length" and r.tokens_generated == 5 + i
        assert [t for _, t in h.sink.tokens[r.request_id]] == h.solo_tokens(r.request_id, 5 + i)
    assert len(h.sink.finished) == 10 and h.scheduler.slots.free_count() == 3
    assert h.scheduler.step() is False and not h.scheduler.has_work


def test_admission_balances_groups():
    h = Harness(**PIPED)
    streams(h, 4)
    h.run(until=5.0)
    slots = sorted(h.requests[f"stream{i}"].slot for i in range(4))
    groups = [h.scheduler.slots.group_of(s) for s in slots]
    assert groups.count(0) == 2 and groups.count(1) == 2


def test_cancel_waiting_and_decoding_requests():
    h = Harness(batch=1, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=8192)
    h.add("a", 64, max_tokens=1_000_000)
    h.add("b", 64, max_tokens=10)
    h.cancel_at(0.5, "b")  # still waiting: never admitted
    h.cancel_at(1.0, "a")  # decoding: stops at the next boundary
    h.run()
    assert h.requests["b"].finish_reason == "cancelled" and not h.events_of("ADMIT", "b")
    assert not h.events_of("BSTOP", "b")
    a_stop = h.events_of("BSTOP", "a")[0]
    assert a_stop.fields["phase"] == "decoding" and 1.0 <= a_stop.t < 1.1
    assert h.scheduler.cancel("a") is False and h.scheduler.cancel("nobody") is False
    assert sorted(r.request_id for r in h.sink.finished) == ["a", "b"]


def test_a_failing_read_or_sink_fails_only_that_request():
    h = Harness(batch=4, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=8192)
    h.executor.fail_read.add("bad_read")
    h.sink.fail_on.add("bad_sink")
    for name in ("ok1", "bad_read", "bad_sink", "ok2"):
        h.add(name, 100, max_tokens=6)
    h.run()
    reasons = {r.request_id: r.finish_reason for r in h.sink.finished}
    assert reasons == {"ok1": "length", "bad_read": "error", "bad_sink": "error", "ok2": "length"}
    assert "read failure" in h.requests["bad_read"].error and "sink failure" in h.requests["bad_sink"].error
    assert h.scheduler.slots.free_count() == 4


def test_the_sink_decides_the_finish_and_the_context_never_overflows():
    h = Harness(batch=2, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=120)
    h.add("ctx", 100, max_tokens=1000)
    h.run()
    r = h.requests["ctx"]
    assert r.finish_reason == "length" and r.prompt_tokens + r.tokens_generated == 120  # the sink's finish_reason
    h1 = Harness(batch=2, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=120)
    h1.sink.ctx = 1 << 40  # a sink that never ends a request: the scheduler fails it at the context's end
    h1.add("ctx", 100, max_tokens=1000)
    h1.run()
    r = h1.requests["ctx"]
    assert r.finish_reason == "error" and "context (120 tokens) is full" in r.error and r.tokens_generated == 20
    h2 = Harness(batch=2, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=4096)
    req = h2.request("stop", 50)
    h2.sink.stop_ids = frozenset({h2.sim.token_for(req, 3).token_id})
    h2.scheduler.add(req)
    h2.run()
    assert req.finish_reason == "stop" and req.tokens_generated <= 4


def test_add_rejects_what_the_context_cannot_hold_and_duplicate_ids():
    from strata_engine.errors import RequestError

    h = Harness(batch=2, batch_groups=1, num_stages=1, prefill_chunk=64, ctx=128)
    with pytest.raises(RequestError, match="context holds 128"):
        h.scheduler.add(h.request("big", 128))
    with pytest.raises(RequestError, match="empty"):
        h.scheduler.add(h.request("empty", 0))
    h.scheduler.add(h.request("x", 10))
    with pytest.raises(RequestError, match="already in use"):
        h.scheduler.add(h.request("x", 10))


def test_scheduler_package_imports_no_torch():
    code = "import sys; import strata_engine.scheduler.scheduler, strata_engine.executors.sim, strata_engine.executors.sim.calibrate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "config",
    [dict(piped_read_piece=8 * K), dict(pause_target_ms=500.0), dict(read_mix=1), dict()],
    ids=["pieces", "target", "mixed", "release"],
)
def test_every_step_is_one_plan_and_at_most_one_executor_call(config):
    from strata_engine.scheduler.plans import BoundaryPlan, LeadInPlan, ReadPlan, Start

    h = Harness(**PIPED, **config)
    names = streams(h, 2)
    h.add("first", 20 * K, max_tokens=2, at=0.5)
    h.add("second", 20 * K, max_tokens=2, at=0.6)  # follows a read: a lead-in where the mode has boundaries
    h.add("short", 100, max_tokens=2, at=1.5)  # a give-way
    stop_streams_after(h, names, "second")
    seen = set()
    for _ in range(100_000):
        plan = h.scheduler.plan()
        calls = len([c for c in h.executor.calls if c[0] in ("read", "decode", "mixed")])
        if not h.scheduler.step():
            if h.clock.next_timer() is None:
                break
            h.clock.advance_to(h.clock.next_timer())
            continue
        made = [c[0] for c in h.executor.calls if c[0] in ("read", "decode", "mixed")][calls:]
        assert len(made) <= 1, f"{type(plan).__name__} made {made}"
        seen.add(type(plan))
        if isinstance(plan, ReadPlan):
            assert isinstance(plan.start, Start) and made in (["read"], ["mixed"])
        if isinstance(plan, LeadInPlan):
            assert made == ["decode"] and h.events_of("LEADIN")
    assert ReadPlan in seen and (BoundaryPlan in seen) == bool(config)  # the release reads in one run: no boundary
    assert (LeadInPlan in seen) == ("read_mix" not in config and bool(config))
    assert h.requests["short"].finish_reason == "length" and bool(h.events_of("YIELDED")) == bool(config)


def test_a_cancel_during_the_lead_in_stops_the_read_before_it_starts():
    from strata_engine.scheduler.plans import LeadInPlan, StopPlan

    h = Harness(**PIPED, piped_read_piece=8 * K)
    names = streams(h, 2)
    h.add("first", 16 * K, max_tokens=2, at=0.5)
    h.add("second", 16 * K, max_tokens=2, at=0.6)
    for _ in range(10_000):
        plan = h.scheduler.plan()
        if isinstance(plan, LeadInPlan) and plan.request.request_id == "second":
            break
        if not h.scheduler.step():
            h.clock.advance_to(h.clock.next_timer())
    else:
        raise AssertionError("no lead-in before the second read")
    h.clock.at(h.clock.now + 0.001, lambda: h.scheduler.cancel("second"))  # while the lead-in's budget runs
    h.scheduler.step()
    assert h.events_of("LEADIN", "second") and isinstance(h.scheduler.plan(), StopPlan)
    for name in names:
        h.scheduler.cancel(name)
    h.run()
    assert h.events_of("BSTOP", "second")[0].fields["tokens_read"] == 0
    assert not [c for c in h.executor.calls if c[0] == "read" and c[1] == "second"]
