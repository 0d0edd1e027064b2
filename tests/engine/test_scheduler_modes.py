"""The mixed read (each micro-batch carries a read chunk plus a group's decode tokens)
and the pause target (a read run that ends itself at the target, by its own measured chunk completions), both ending a run early at a
chunk boundary when a short request could take over; over the simulated executor on a fake clock
(the real torch pipeline's run of these modes is in test_pieces_e2e.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fakes.scheduler import PIPED, TEST_PROFILE, Harness, K, longest_stream_gap, stop_streams_after, streams
from strata_engine.config import SchedulerConfig
from strata_engine.events import EventLog
from strata_engine.scheduler.scheduler import Scheduler
from tokens_equal import assert_tokens_equal


def assert_solo(h: Harness, names: list[str]) -> None:
    for name in names:
        got = [t for _, t in h.sink.tokens[name]]
        assert_tokens_equal(
            expected=h.solo_tokens(name, len(got)),
            actual=got,
            label=name,
            expected_name="solo",
            actual_name="interleaved",
        )


# -- the mixed read ---------------------------------------------------------------------------------
def test_mixed_read_keeps_the_streams_going_during_a_long_read():
    h = Harness(**PIPED, read_mix=1)
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    stop_streams_after(h, names, "join64k")
    h.run()
    mixes = h.events_of("MIX", "join64k")
    assert len(mixes) == 1 and mixes[0].fields["tokens"] == 64 * K and mixes[0].fields["decode_tokens"] > 100
    read_ms = h.events_of("READ_DONE", "join64k")[0].fields["read_ms"]
    assert longest_stream_gap(h, names, since=2.0) < read_ms / 1000 / 20
    assert "read" not in [c[0] for c in h.executor.calls if c[1] == "join64k"]
    assert h.executor.asked > 0  # the run was interruptible, nobody interrupted it
    assert_solo(h, names + ["join64k"])
    assert not h.events_of("PIECE") and not h.events_of("YIELDED")


def test_mixed_read_gives_way_at_the_next_chunk_boundary():
    h = Harness(**PIPED, read_mix=1)
    names = streams(h, 2)
    h.add("D", 40_000, max_tokens=2, at=1.0)
    h.add("E", 100, max_tokens=2, at=2.5)
    stop_streams_after(h, names, "D")
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.request_id == "D" and y.fields["to"] == "E"
    assert 0 < y.fields["tokens_read"] < 40_000 and y.fields["tokens_read"] % 512 == 0
    chunk_s = 0.1 * 512 / 1000  # one 512-token chunk on one stage of TEST_PROFILE
    assert (
        y.t - h.requests["E"].arrival <= (PIPED["num_stages"] + 1) * chunk_s + 0.05
    )  # the chunks in flight, not the run
    assert h.events_of("RESUME", "D")[0].t >= h.events_of("READ_DONE", "E")[0].t
    d_chunks = [p for c in h.executor.calls if c[0] == "mixed" and c[1] == "D" for p in c[2]]
    read = sum(m.fields["tokens"] for m in h.events_of("MIX", "D"))
    assert read == 40_000 and d_chunks[0] == (0, 512)  # nothing re-read: the MIX lines add up to the prompt
    assert_solo(h, names + ["D", "E"])


def test_mixed_read_with_pieces_still_gives_way():
    h = Harness(**PIPED, read_mix=1, piped_read_piece=8 * K)
    names = streams(h, 2)
    h.add("D", 40_000, max_tokens=2, at=1.0)
    h.add("E", 100, max_tokens=2, at=1.5)
    stop_streams_after(h, names, "D")
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.fields["to"] == "E" and y.fields["tokens_read"] % 512 == 0 and y.fields["tokens_read"] < 8 * K
    assert [m.fields["tokens"] for m in h.events_of("MIX", "D")][1:-1] == [8 * K] * 4  # pieces after the give-way
    assert h.requests["D"].finish_reason == "length"


def test_a_cancelled_mixed_read_stops_at_the_next_chunk_not_the_run_end():
    h = Harness(**PIPED, read_mix=1)
    names = streams(h, 2)
    h.add("long", 64 * K, max_tokens=2, at=1.0)
    h.cancel_at(2.0, "long")
    h.clock.at(4.0, lambda: [h.scheduler.cancel(n) for n in names])
    h.run()
    bstop = h.events_of("BSTOP", "long")[0]
    assert bstop.t < 2.5 and 0 < bstop.fields["tokens_read"] < 64 * K
    assert h.requests["long"].finish_reason == "cancelled"


def test_mixed_read_under_a_pause_target_spaces_the_decode_tokens_up_to_the_target():
    def run(target_ms):
        h = Harness(**PIPED, read_mix=1, pause_target_ms=target_ms)
        names = streams(h)
        h.add("long", 40_000, max_tokens=2, at=1.0)
        stop_streams_after(h, names, "long")
        h.run()
        mix = h.events_of("MIX", "long")
        assert [m.fields["tokens"] for m in mix] == [40_000]  # one run: a piece would only add a pause
        start = (
            h.events_of("READ_START", "long")[0].t + TEST_PROFILE.read_run_ms / 1000
        )  # the run's fixed cost is paid once
        done = h.events_of("READ_DONE", "long")[0].t
        gap = max(h.sink.longest_gap(n, since=start, until=done) for n in names)
        assert_solo(h, names + ["long"])
        return mix[0].fields["decode_tokens"], mix[0].fields["read_ms"], gap

    every_tokens, every_ms, every_gap = run(0.0)
    spaced_tokens, spaced_ms, spaced_gap = run(500.0)
    assert spaced_tokens < every_tokens / 2 and spaced_ms < every_ms  # fewer decode rows: a cheaper read
    assert every_gap < spaced_gap <= 0.5  # but no stream waits longer than the target


def test_the_mixed_read_needs_an_executor_with_mixed():
    class ReadOnly:
        num_stages = 2

        def read(self, request, run, on_token):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="STRATA_PIPED_READ_MIX=1 needs an executor with mixed"):
        Scheduler(
            SchedulerConfig(batch=4, batch_groups=2, read_mix=1),
            ReadOnly(),
            clock=lambda: 0.0,
            sink=None,
            events=EventLog(),
        )
    for other in (dict(pause_target_ms=500.0), dict(piped_read_piece=512)):  # their limits travel in the RunSpec
        Scheduler(SchedulerConfig(batch=4, batch_groups=2, **other), ReadOnly(), lambda: 0.0, None, EventLog())


# -- the pause target -------------------------------------------------------------------------------
def test_pause_target_pieces_are_the_largest_runs_within_the_target():
    target_ms = 1000.0
    h = Harness(**PIPED, pause_target_ms=target_ms)
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    h.add("join32k", 32 * K, max_tokens=8, at=6.0)
    stop_streams_after(h, names, "join32k")
    h.run()
    for joiner in ("join64k", "join32k"):
        sizes = [p.fields["tokens"] // 512 for p in h.events_of("TARGET", joiner)]
        # TEST_PROFILE: 100 ms a run, 51.2 ms a chunk per stage: 100 + (k + 1) x 51.2 <= 1000 -> k = 16, from the first piece on
        assert sizes[:-1] == [16] * (len(sizes) - 1) and 1 <= sizes[-1] <= 16
    pieces = [p for p in h.events_of("TARGET") if p.request_id.startswith("join")]
    assert all(p.fields["read_ms"] <= target_ms for p in pieces)
    assert target_ms in h.executor.budgets
    budget = h.config.decode_max_ms + 50  # one budget and its drain
    assert longest_stream_gap(h, names, since=2.0) <= (target_ms + budget) / 1000
    assert_solo(h, names + ["join64k", "join32k"])


def test_pause_target_follows_the_cost_of_attention_as_the_context_grows():
    profile = replace(TEST_PROFILE, read_token_kctx_ms=0.01)  # attention: a chunk at 32K context costs ~4x one at 0
    h = Harness(profile=profile, **PIPED, pause_target_ms=1000.0)
    names = streams(h, 2)
    h.add("long", 48 * K, max_tokens=2, at=1.0)
    stop_streams_after(h, names, "long")
    h.run()
    pieces = h.events_of("TARGET", "long")
    sizes = [p.fields["tokens"] for p in pieces[:-1]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 2 * sizes[-1]  # later chunks cost more: fewer fit
    # The estimate averages the last intervals, so it lags attention's growth by a little: 2% here.
    assert all(p.fields["read_ms"] <= 1020.0 for p in pieces)


def test_pause_target_takes_no_boundaries_when_nothing_decodes_and_no_one_waits():
    h = Harness(**PIPED, pause_target_ms=500.0)
    h.add("alone", 45 * K, max_tokens=1)
    h.run()
    assert [c[0] for c in h.executor.calls if c[0] in ("read", "decode")] == ["read"]
    assert h.executor.results[h.executor.kinds().index("read")].tokens == 45 * K


def test_pause_target_idle_read_gives_way_to_a_short_question_at_a_chunk_boundary():
    h = Harness(**PIPED, pause_target_ms=500.0)
    h.add("read45k", 45 * K, max_tokens=4)
    h.add("question", 24, max_tokens=1, at=1.0)  # done with its first token: nothing decodes after it
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.request_id == "read45k" and y.fields["to"] == "question"
    first = h.sink.times("question")[0]
    assert first - 1.0 < 0.5  # the chunks in flight, then its own short run; not the 45K read
    reads = [c[2] for c in h.executor.calls if c[0] == "read" and c[1] == "read45k"]
    assert len(reads) == 2 and reads[1][0][0] == y.fields["tokens_read"]  # resumed where it stopped
    assert_solo(h, ["read45k", "question"])


# -- the merged decode --------------------------------------------------------------------------------
def test_merged_decode_sends_every_group_as_one_micro_batch_while_nothing_is_read():
    h = Harness(**PIPED, read_mix=1, decode_merge=1)
    names = streams(h, 4)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    stop_streams_after(h, names, "join64k")
    h.run()
    decodes = [c[1] for c in h.executor.calls if c[0] == "decode"]
    assert decodes and all(len(groups) == 1 for groups in decodes)  # one group: both groups' rows together
    assert (4,) in decodes  # all four streams in it once they all decode
    mix = h.events_of("MIX", "join64k")[0]
    assert mix.fields["decode_tokens"] > 100  # the read still carries the groups' tokens, a group at a time
    assert_solo(h, names + ["join64k"])


def test_without_the_merge_each_group_is_its_own_micro_batch():
    h = Harness(**PIPED, read_mix=1)
    names = streams(h, 4)
    h.clock.at(3.0, lambda: [h.scheduler.cancel(n) for n in names])
    h.run()
    decodes = [c[1] for c in h.executor.calls if c[0] == "decode"]
    assert (2, 2) in decodes and all(len(groups) == 2 for groups in decodes)
