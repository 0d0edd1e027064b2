"""Boundary stress: chunk sizes 1, 4, 16; pieces of one chunk and of 32; every behaviour. Each request
must read every prompt position exactly once, in order, and produce exactly its solo tokens."""

from __future__ import annotations

import threading
import time

import pytest

from fakes.scheduler import Harness
from strata_engine.executors.sim.profile import CostProfile

CHEAP = CostProfile(
    name="cheap",
    num_stages=2,
    read_run_ms=2.0,
    read_token_ms=0.05,
    read_chunk_ms=0.2,
    read_token_kctx_ms=0.01,
    decode_step_ms=1.0,
    decode_seq_ms=0.2,
)

MODES = {
    "one-group": dict(batch_groups=1),
    "release": dict(batch_groups=2),
    "pieces-1-chunk": dict(batch_groups=2, piece_chunks=1),
    "pieces-32-chunks": dict(batch_groups=2, piece_chunks=32),
    "pieces-3-chunks": dict(batch_groups=2, piece_chunks=3),
}


def build(chunk: int, mode: str) -> Harness:
    opts = dict(MODES[mode])
    piece = opts.pop("piece_chunks", 0) * chunk
    return Harness(
        CHEAP,
        batch=4,
        num_stages=2,
        prefill_chunk=chunk,
        ctx=4096,
        piped_read_piece=piece,
        decode_min_ms=1.0,
        decode_max_ms=20.0,
        **opts,
    )


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("chunk", [1, 4, 16])
def test_every_request_reads_each_position_once_and_equals_its_solo_tokens(chunk, mode):
    h = build(chunk, mode)
    lengths = {"s0": 5, "s1": 9, "long": 300, "mid": 130, "short": 7, "late": 211, "tiny": 1, "gone": 250}
    max_tokens = {"s0": 60, "s1": 45, "long": 6, "mid": 9, "short": 5, "late": 4, "tiny": 3, "gone": 50}
    arrivals = {"s0": 0.0, "s1": 0.0, "long": 0.01, "mid": 0.02, "short": 0.05, "late": 0.2, "tiny": 0.25, "gone": 0.03}
    for name, n in lengths.items():
        h.add(name, n, max_tokens=max_tokens[name], at=arrivals[name])
    h.cancel_at(0.3, "gone")
    h.run()
    assert len(h.sink.finished) == len(lengths)
    for name, n in lengths.items():
        r = h.requests[name]
        if name == "gone" and r.finish_reason == "cancelled":
            continue
        assert r.finish_reason == "length", (name, r.finish_reason, r.error)
        reads = [c[2] for c in h.executor.calls if c[0] == "read" and c[1] == name]
        spans = [span for run in reads for span in run]
        assert spans == [(s, min(s + chunk, n)) for s in range(0, n, chunk)], name
        assert [t for _, t in h.sink.tokens[name]] == h.solo_tokens(name, max_tokens[name]), name
        if mode.startswith("pieces"):
            piece_chunks = MODES[mode]["piece_chunks"]
            assert all(len(run) <= piece_chunks for run in reads)
        if mode == "release":
            assert len(reads) == 1
    yields, resumes = len(h.events_of("YIELDED")), len(h.events_of("RESUME"))
    assert yields == resumes and (mode != "release" or yields == 0)  # every parked read came back
    assert h.scheduler.slots.free_count() == 4 and not h.scheduler.has_work
    assert h.sim._kv == {}  # every slot was freed


def test_adds_and_cancels_from_other_threads():
    h = Harness(CHEAP, batch=3, batch_groups=1, num_stages=1, prefill_chunk=8, ctx=4096)
    added: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(15):
            name = f"c{k}-{i}"
            request = h.request(name, 10 + (7 * i + k) % 40, max_tokens=3 + i % 4)
            h.scheduler.add(request)
            with lock:
                added.append(name)
            if i % 5 == 4:
                h.scheduler.cancel(name)
            time.sleep(0.0005)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while (any(t.is_alive() for t in threads) or h.scheduler.has_work) and time.monotonic() < deadline:
        if not h.scheduler.step():
            time.sleep(0.0005)
    for t in threads:
        t.join()
    assert len(added) == 60 and sorted(r.request_id for r in h.sink.finished) == sorted(added)
    for r in h.sink.finished:
        assert r.finish_reason in ("length", "cancelled"), (r.request_id, r.error)
        if r.finish_reason == "length":
            assert [t for _, t in h.sink.tokens[r.request_id]] == h.solo_tokens(r.request_id, r.max_tokens)
