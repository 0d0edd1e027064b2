"""Issue 7's modes: the mixed read (each micro-batch carries a read chunk plus a group's decode tokens)
and the pause target (piece size from a fitted cost of recent runs), both ending a run early at a
chunk boundary when a short request could take over; over the simulated executor on a fake clock,
and once on the real torch pipeline."""
from __future__ import annotations

import pytest

from fakes import TEST_PROFILE, FakeClock, Harness, RecordingExecutor, RecordingSink
from strata_engine.config import SchedulerConfig
from strata_engine.events import EventLog
from strata_engine.scheduler.batch_read import fit_run_cost, run_stage_tokens, target_piece_chunks
from strata_engine.scheduler.scheduler import Scheduler
from strata_engine.sim import SimExecutor
from test_scheduler import PIPED, K, longest_stream_gap, stop_streams_after, streams


class InterruptibleRecorder(RecordingExecutor):
    """The shared recorder, forwarding should_stop (issue 7's modes need it) and counting its calls."""

    def __init__(self, inner):
        super().__init__(inner)
        self.asked = 0

    def _asking(self, should_stop):
        if should_stop is None:
            return None

        def ask() -> bool:
            self.asked += 1
            return should_stop()
        return ask

    def read(self, request, chunks, on_token, should_stop=None):
        self.calls.append(("read", request.request_id, tuple(chunks)))
        return self._keep(self.inner.read(request, chunks, on_token, should_stop=self._asking(should_stop)))

    def mixed(self, request, chunks, groups, on_token, should_stop=None):
        self.calls.append(("mixed", request.request_id, tuple(chunks)))
        return self._keep(self.inner.mixed(request, chunks, groups, on_token, should_stop=self._asking(should_stop)))


class ModeHarness(Harness):
    """The shared harness over the forwarding recorder (built without Harness's own scheduler, which
    would refuse the recorder that does not forward should_stop)."""

    def __init__(self, **config):
        self.config = SchedulerConfig(**config)
        self.clock = FakeClock()
        self.sim = SimExecutor(TEST_PROFILE, clock=self.clock, sleep=self.clock.sleep, vocab_size=1000, seed=1)
        self.executor = InterruptibleRecorder(self.sim)
        self.sink = RecordingSink(self.clock)
        self.events = EventLog()
        self.scheduler = Scheduler(self.config, self.executor, clock=self.clock, sink=self.sink, events=self.events)
        self.requests = {}


def assert_solo(h: Harness, names: list[str]) -> None:
    for name in names:
        got = [t for _, t in h.sink.tokens[name]]
        assert got == h.solo_tokens(name, len(got)), f"{name}: interleaved tokens differ from solo"


# -- the mixed read ---------------------------------------------------------------------------------
def test_mixed_read_keeps_the_streams_going_during_a_long_read():
    h = ModeHarness(**PIPED, read_mix=1)
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
    h = ModeHarness(**PIPED, read_mix=1)
    names = streams(h, 2)
    h.add("D", 40_000, max_tokens=2, at=1.0)
    h.add("E", 100, max_tokens=2, at=2.5)
    stop_streams_after(h, names, "D")
    h.run()
    y = h.events_of("YIELDED")[0]
    assert y.request_id == "D" and y.fields["to"] == "E"
    assert 0 < y.fields["tokens_read"] < 40_000 and y.fields["tokens_read"] % 512 == 0
    chunk_s = 0.1 * 512 / 1000  # one 512-token chunk on one stage of TEST_PROFILE
    assert y.t - h.requests["E"].arrival <= (PIPED["num_stages"] + 1) * chunk_s + 0.05  # the chunks in flight, not the run
    assert h.events_of("RESUME", "D")[0].t >= h.events_of("READ_DONE", "E")[0].t
    d_chunks = [p for c in h.executor.calls if c[0] == "mixed" and c[1] == "D" for p in c[2]]
    read = sum(m.fields["tokens"] for m in h.events_of("MIX", "D"))
    assert read == 40_000 and d_chunks[0] == (0, 512)  # nothing re-read: the MIX lines add up to the prompt
    assert_solo(h, names + ["D", "E"])


def test_mixed_read_with_pieces_still_gives_way():
    h = ModeHarness(**PIPED, read_mix=1, piped_read_piece=8 * K)
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
    h = ModeHarness(**PIPED, read_mix=1)
    names = streams(h, 2)
    h.add("long", 64 * K, max_tokens=2, at=1.0)
    h.cancel_at(2.0, "long")
    h.clock.at(4.0, lambda: [h.scheduler.cancel(n) for n in names])
    h.run()
    bstop = h.events_of("BSTOP", "long")[0]
    assert bstop.t < 2.5 and 0 < bstop.fields["tokens_read"] < 64 * K
    assert h.requests["long"].finish_reason == "cancelled"


def test_mixed_read_ignores_the_pause_target():
    h = ModeHarness(**PIPED, read_mix=1, pause_target_ms=300.0)
    names = streams(h, 2)
    h.add("long", 20_000, max_tokens=2, at=1.0)
    stop_streams_after(h, names, "long")
    h.run()
    assert [m.fields["tokens"] for m in h.events_of("MIX", "long")] == [20_000]  # one run: pieces would only add pauses


def test_the_modes_need_an_executor_that_can_be_interrupted():
    class ReadOnly:
        num_stages = 2

        def read(self, request, chunks, on_token):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="STRATA_PIPED_READ_MIX=1 needs an executor with mixed"):
        Scheduler(SchedulerConfig(batch=4, batch_groups=2, read_mix=1), ReadOnly(), clock=lambda: 0.0, sink=None, events=EventLog())
    with pytest.raises(ValueError, match=r"read\(\) takes should_stop"):
        Scheduler(SchedulerConfig(batch=4, batch_groups=2, pause_target_ms=500.0), ReadOnly(), clock=lambda: 0.0, sink=None,
                  events=EventLog())
    Scheduler(SchedulerConfig(batch=4, batch_groups=2, piped_read_piece=512), ReadOnly(), clock=lambda: 0.0, sink=None,
              events=EventLog())  # the spec's modes never ask


# -- the pause target -------------------------------------------------------------------------------
def test_pause_target_converges_on_the_largest_piece_that_fits_and_no_stream_pauses_much_longer():
    target_ms = 1000.0
    h = ModeHarness(**PIPED, pause_target_ms=target_ms)
    names = streams(h)
    h.add("join64k", 64 * K, max_tokens=8, at=2.0)
    h.add("join32k", 32 * K, max_tokens=8, at=6.0)
    stop_streams_after(h, names, "join32k")
    h.run()
    pieces = [p for p in h.events_of("PIECE") if p.request_id.startswith("join")]
    sizes = [p.fields["tokens"] // 512 for p in pieces]
    # TEST_PROFILE: 100 ms a run, 51.2 ms a chunk per stage: 100 + (k + 1) x 51.2 <= 1000 -> k = 16
    assert sizes[0] == 1 and sizes[1] == 16 and max(sizes) == 16  # one probe, then the fit
    assert all(p.fields["read_ms"] <= target_ms for p in pieces)
    budget = h.config.decode_max_ms + 50  # one budget and its drain
    assert longest_stream_gap(h, names, since=2.0) <= (target_ms + budget) / 1000
    assert_solo(h, names + ["join64k", "join32k"])


def test_pause_target_takes_no_boundaries_when_nothing_decodes_and_no_one_waits():
    h = ModeHarness(**PIPED, pause_target_ms=500.0)
    h.add("alone", 45 * K, max_tokens=1)
    h.run()
    assert [c[0] for c in h.executor.calls if c[0] in ("read", "decode")] == ["read"]
    assert h.executor.results[h.executor.kinds().index("read")].tokens == 45 * K


def test_pause_target_idle_read_gives_way_to_a_short_question_at_a_chunk_boundary():
    h = ModeHarness(**PIPED, pause_target_ms=500.0)
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


# -- the pure functions -----------------------------------------------------------------------------
def test_run_stage_tokens_counts_the_pipeline_fill():
    assert run_stage_tokens(64, 64, 2) == 128
    assert run_stage_tokens(16 * K, 1024, 2) == 17 * K
    assert run_stage_tokens(1000, 488, 1) == 1000
    with pytest.raises(ValueError, match="bad run shape"):
        run_stage_tokens(100, 200, 2)


def test_fit_run_cost_tells_the_fixed_cost_from_runs_of_different_sizes():
    assert fit_run_cost([]) is None
    fixed, per_token = fit_run_cost([(128, 650 + 12.8)])
    assert fixed == 0.0 and per_token == pytest.approx(662.8 / 128)  # one size: all per token, over-estimating
    samples = [(u, 650 + 0.1 * u) for u in (128, 2048, 12 * 1024)]
    fixed, per_token = fit_run_cost(samples)
    assert fixed == pytest.approx(650) and per_token == pytest.approx(0.1)
    grown = samples + [(12 * 1024 + 1, 650 + 0.11 * (12 * 1024 + 1))]  # attention: the newest run costs more per token
    assert fit_run_cost(grown)[1] > 0.1
    with pytest.raises(ValueError, match="bad run sample"):
        fit_run_cost([(0, 10.0)])


def test_target_piece_chunks():
    assert target_piece_chunks(2000.0, None, 1024, 2) == 1  # nothing measured yet: one chunk
    assert target_piece_chunks(2000.0, (650.0, 0.1016), 1024, 2) == 11  # 650 + 12 x 104 = 1898 <= 2000
    assert target_piece_chunks(500.0, (650.0, 0.1016), 1024, 2) == 1  # not even one fits: one
    assert target_piece_chunks(1e9, (0.0, 0.1), 512, 2) == 32
    with pytest.raises(ValueError, match="pause target"):
        target_piece_chunks(0.0, (0.0, 1.0), 512, 2)


# -- the real torch pipeline ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_solo():
    from test_pieces_e2e import CHUNK, GREEDY, PROMPTS

    from strata_engine.engine import Engine

    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        return {name: engine.generate([p], GREEDY)[0].token_ids for name, p in PROMPTS.items()}


@pytest.mark.parametrize("env", [{"STRATA_PIPED_READ_MIX": "1"}, {"STRATA_PIPED_PAUSE_TARGET_MS": "100"}], ids=["mixed", "target"])
def test_torch_pipeline_interleaved_equals_solo(torch_solo, env):
    """C is read while A and B decode; D's read, interrupted by the short E, gives way mid-run."""
    from test_pieces_e2e import CHUNK, GREEDY, LONG, PROMPTS

    from strata_engine import SamplingParams
    from strata_engine.engine import Engine

    solo = torch_solo
    long_params = SamplingParams(max_tokens=200, ignore_eos=True)
    with Engine.from_pretrained(batch=6, batch_groups=2, split=2, prefill_chunk=CHUNK, log_events=False, env=env) as engine:
        a = engine.submit(PROMPTS["A"], long_params, request_id="A")
        b = engine.submit(PROMPTS["B"], long_params, request_id="B")
        next(iter(a)), next(iter(b))
        handles = {name: engine.submit(PROMPTS[name], GREEDY, request_id=name) for name in "CDE"}
        outs = {name: h.result(timeout=120) for name, h in handles.items()}
        outs["A"], outs["B"] = a.result(timeout=120), b.result(timeout=120)
        events = list(engine.events.since(0)[0])
    yielded = [e for e in events if e.kind == "YIELDED"]
    assert yielded and yielded[0].fields["to"] == "E" and yielded[0].fields["tokens_read"] < LONG
    for name, expected in solo.items():
        got = outs[name].token_ids[: len(expected)]
        index = next((i for i, (x, y) in enumerate(zip(expected, got)) if x != y), None)
        assert index is None, f"{name}: first difference at {index}: solo={expected[index]} interleaved={got[index]}"
