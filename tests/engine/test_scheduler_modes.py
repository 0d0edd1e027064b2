"""Issue 7's modes: the mixed read (each micro-batch carries a read chunk plus a group's decode tokens)
and the pause target (piece size from the measured cost of recent chunks)."""
from __future__ import annotations

import pytest

from fakes import Harness
from strata_engine.config import SchedulerConfig
from strata_engine.events import EventLog
from strata_engine.scheduler.scheduler import Scheduler
from test_scheduler import PIPED, K, longest_stream_gap, stop_streams_after, streams


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
    start, done = h.events_of("READ_START", "join64k")[0].t, h.events_of("READ_DONE", "join64k")[0].t
    assert "read" not in [c[0] for c in h.executor.calls if c[1] == "join64k"]
    for name in names + ["join64k"]:
        got = [t for _, t in h.sink.tokens[name]]
        assert got == h.solo_tokens(name, len(got))
    assert done > start and not h.events_of("PIECE")


def test_mixed_read_with_pieces_still_gives_way_at_piece_ends():
    h = Harness(**PIPED, read_mix=1, piped_read_piece=8 * K)
    names = streams(h, 2)
    h.add("D", 40_000, max_tokens=2, at=1.0)
    h.add("E", 100, max_tokens=2, at=1.5)
    stop_streams_after(h, names, "D")
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.fields["to"] == "E" and y.fields["tokens_read"] % (8 * K) == 0
    assert h.requests["D"].finish_reason == "length"


def test_pause_target_sizes_pieces_so_no_stream_pauses_much_longer():
    target_ms = 1000.0
    h = Harness(**PIPED, pause_target_ms=target_ms)
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    h.add("join32k", 32 * K, max_tokens=8, at=6.0)
    stop_streams_after(h, names, "join32k")
    h.run()
    pieces = h.events_of("PIECE")
    sizes = [p.fields["tokens"] for p in pieces if p.request_id.startswith("join")]
    assert sizes[0] < max(sizes) and max(sizes) > 8 * 512  # starts cautious, grows on measurement
    assert all(p.fields["read_ms"] <= target_ms for p in pieces)
    budget = h.config.decode_max_ms + 50  # one budget and its drain
    assert longest_stream_gap(h, names, since=2.0) <= (target_ms + budget) / 1000


def test_pause_target_takes_no_boundaries_when_nothing_decodes_and_no_one_waits():
    h = Harness(**PIPED, pause_target_ms=500.0)
    h.add("alone", 45 * K, max_tokens=1)
    h.run()
    assert [c[0] for c in h.executor.calls if c[0] in ("read", "decode")] == ["read"]


def test_mixed_read_needs_an_executor_that_can_mix():
    class ReadOnly:
        num_stages = 2

    with pytest.raises(ValueError, match="STRATA_PIPED_READ_MIX=1 needs an executor with mixed"):
        Scheduler(SchedulerConfig(batch=4, batch_groups=2, read_mix=1), ReadOnly(), clock=lambda: 0.0, sink=None, events=EventLog())
