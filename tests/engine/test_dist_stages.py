"""Stages as torch.distributed ranks (gloo, localhost): the same logits as the thread pipeline bit for bit,
errors per micro-batch, and greedy tokens equal to solo runs and to the thread pipeline with 2 and 3
ranks, 1 and 2 groups, pieces and the mixed read."""

from __future__ import annotations

import os

import pytest
import torch

from strata_engine import SamplingParams
from strata_engine.config import EngineConfig
from strata_engine.engine import Engine
from strata_engine.model.weights import load_model
from strata_engine.runtime.stage_ranks.pipeline import DistPipeline, StageRankError
from strata_engine.runtime.stage_ranks.ranks import LocalRanks
from strata_engine.runtime.stage_ranks.stage import StageSpec
from strata_engine.runtime.stage_ranks.wire import Kind, StageError, WirePart, decode, encode
from strata_engine.runtime.invariance import default_row_tile
from strata_engine.runtime.native.choice import choose as choose_kernels
from strata_engine.runtime.pipeline import MicroBatch, Part, Pipeline
from strata_engine.runtime.built_stage import split_layers
from strata_engine.runtime.stage_plan import plan_stages
from strata_engine.runtime_config import RuntimeConfig

from tokens_equal import assert_tokens_equal

MODEL = "strata-tiny-moe"
CHUNK = 8
PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "import os\nimport sys\n\nfor name in",
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.",
    "for i in range(10):\n    total += i * i\nprint(",
]
GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)
STAGES = plan_stages(4, 2, (), "cpu")


def prompt_part(slot: int = 0, length: int = 5, start: int = 0) -> Part:
    return Part.ragged([(slot, start, list(range(1, length + 1)))], want_logits=True)


def test_the_stage_spec_carries_the_runtime_config_to_the_ranks_as_json():
    runtime = RuntimeConfig(threads=2, compile=True, gemms="template", row_tile=4, decode_all_threads=True)
    spec = StageSpec(1, "cpu", 2, 4, 2, "strata-tiny-moe", 4, 64, "float32", runtime, 1 << 20, 60.0, "q8")
    assert StageSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match=r"row_tile \(STRATA_ROW_TILE\) must be a whole number >= 1"):
        StageSpec.from_json(spec.to_json().replace(b'"row_tile": 4', b'"row_tile": 0'))


def test_frames_round_trip_every_field_and_dtype():
    hidden = torch.randn(16, 4).to(torch.bfloat16)  # a ragged part's tokens, padded to a row tile
    part = WirePart(
        torch.tensor([1, 2, 3, 4]),
        torch.tensor([0, 1, 2, 7]),
        torch.tensor([[3, 0], [1, 0]])[:, 0],
        torch.tensor([3, 1]),
        True,
        hidden,
    )  # a chunk of 3 and a decode row; a strided slots view
    bare = WirePart(torch.tensor([9]), torch.tensor([4]), torch.tensor([0]), torch.tensor([1]), False)
    buffer = torch.zeros(4096, dtype=torch.uint8)
    frame_bytes = encode(Kind.WORK, 41, [part, bare], stage_us=[17, 5])
    buffer[: frame_bytes.numel()] = frame_bytes
    frame = decode(buffer)
    assert (frame.kind, frame.seq, frame.stage_us, frame.nbytes) == (Kind.WORK, 41, [17, 5], frame_bytes.numel())
    got, got_bare = frame.parts
    assert torch.equal(got.tokens, part.tokens) and torch.equal(got.positions, part.positions)
    assert torch.equal(got.slots, part.slots) and got.want_logits and not got_bare.want_logits
    assert [(r.slot, r.first, r.length) for r in got.layout().rows] == [(3, 0, 3), (1, 7, 1)]
    assert got.payload.dtype == torch.bfloat16 and torch.equal(got.payload, hidden) and got_bare.payload is None
    text = encode(Kind.FAULT, 2, data="rank 2 is gone".encode())
    assert decode(torch.cat([text, torch.zeros(100, dtype=torch.uint8)])).data == b"rank 2 is gone"
    with pytest.raises(ValueError, match="receive buffer of 10"):
        decode(frame_bytes[:10])


@pytest.fixture(scope="module")
def pipelines():
    """The same two stages as ranks and as threads, one thread each (so the same kernels run)."""
    model, config = load_model(MODEL, dtype=torch.float32)
    tile = default_row_tile(config, "cpu", torch.float32, 1)  # what the thread pipeline probes
    ranks = DistPipeline(
        LocalRanks(2),
        STAGES,
        MODEL,
        num_slots=4,
        ctx=64,
        dtype=torch.float32,
        hidden_size=256,
        vocab_size=258,
        runtime=RuntimeConfig(threads=1, row_tile=tile),
        timeout_s=60,
    )
    choose_kernels(model, 4, 1, decode=False)  # as each rank does: the same path serves each op
    split_layers(model, STAGES, torch.float32)
    threads = Pipeline(model, STAGES, num_slots=4, ctx=64, dtype=torch.float32, runtime=RuntimeConfig(threads=1))
    yield ranks, threads
    ranks.close()
    threads.close()


@pytest.mark.slow
def test_logits_equal_the_thread_pipeline_bit_for_bit(pipelines):
    results = []
    for pipeline in pipelines:
        pipeline.submit(MicroBatch([prompt_part(slot=1, length=3), prompt_part(slot=2, length=1)], tag="read"))
        pipeline.submit(MicroBatch([Part.ragged([(1, 3, [7]), (2, 1, [9])], want_logits=True)], tag="decode"))
        assert pipeline.in_flight == 2
        results.append(pipeline.drain())
        assert pipeline.in_flight == 0
    for got, want in zip(*results):
        assert got.tag == want.tag and got.error is None and want.error is None
        for part_got, part_want in zip(got.parts, want.parts):
            assert part_got.hidden is None
            assert torch.equal(part_got.logits, part_want.logits), f"{got.tag}: logits differ"
    assert len(results[0][0].stage_ms) == 2  # one timing per stage
    assert pipelines[0].health() is None


@pytest.mark.slow
def test_more_micro_batches_in_flight_than_the_ring_holds_do_not_deadlock_it(pipelines):
    # An uninterruptible read submits all its chunks before its first get; every rank's send waits for the
    # next rank's receive, so 40 unreceived micro-batches once filled the ring until a send timed out.
    results = []
    for pipeline in pipelines:
        for position in range(40):
            pipeline.submit(
                MicroBatch([Part.ragged([(0, position, [position % 200 + 1])], want_logits=True)], tag=position)
            )
        assert pipeline.in_flight == 40
        results.append(pipeline.drain())
    for got, want in zip(*results):
        assert got.tag == want.tag and got.error is None, got.error
        assert torch.equal(got.parts[0].logits, want.parts[0].logits), f"micro-batch {got.tag}: logits differ"
    assert pipelines[0].health() is None


@pytest.mark.slow
def test_a_stage_error_fails_that_micro_batch_only(pipelines):
    ranks, _ = pipelines
    ranks.submit(MicroBatch([prompt_part(slot=9)], tag="bad slot"))
    ranks.submit(
        MicroBatch([prompt_part(slot=0, length=1, start=63), prompt_part(slot=1, length=2, start=63)], tag="overflow")
    )
    ranks.submit(MicroBatch([prompt_part(slot=3)], tag="fine"))
    ranks.submit(MicroBatch([prompt_part(slot=3, length=70)], tag="too big"))
    bad, overflow, fine, too_big = ranks.drain()
    assert isinstance(bad.error, ValueError) and "slot 9 out of range" in str(bad.error)
    # ContextOverflowError cannot be rebuilt from its message alone: it comes back as a StageError naming it
    assert isinstance(overflow.error, StageError)
    assert "ContextOverflowError" in str(overflow.error) and "position 64" in str(overflow.error)
    assert fine.error is None and fine.parts[0].logits.shape == (1, 258)
    assert isinstance(too_big.error, ValueError) and "70 token positions" in str(too_big.error)
    assert ranks.health() is None


@pytest.mark.slow
def test_a_stage_rank_that_cannot_load_the_model_says_why_and_leaves_no_process(tmp_path):
    (tmp_path / "config.json").write_text("{}")

    class Recorded(LocalRanks):
        def start(self):
            store = super().start()
            self.started = list(self.procs)
            return store

    ranks = Recorded(2)
    with pytest.raises(StageRankError, match=r"stage rank 1 \(stage 0, layers 0-1, cpu\) failed to start: .*"):
        DistPipeline(
            ranks,
            STAGES,
            str(tmp_path),
            num_slots=1,
            ctx=16,
            dtype=torch.float32,
            hidden_size=256,
            vocab_size=258,
            runtime=RuntimeConfig(threads=1, row_tile=1),
        )
    assert len(ranks.started) == 2 and all(proc.poll() is not None for proc in ranks.started)


def test_stage_workers_config():
    with pytest.raises(ValueError, match="stage_workers must be one of auto, thread, dist, got 'process'"):
        EngineConfig(stage_workers="process")
    with pytest.raises(ValueError, match="--stage-ranks join needs --stage-workers dist"):
        EngineConfig(stage_ranks="join")
    with pytest.raises(ValueError, match="stage_timeout_s must be > 0"):
        EngineConfig(stage_timeout_s=0)
    assert EngineConfig(stage_workers="dist").stage_workers_for() == "dist"
    assert EngineConfig(stage_workers="thread").stage_workers_for() == "thread"
    assert EngineConfig(devices=("cuda:0", "cuda:1")).stage_workers_for() == "thread"
    # auto: ranks where stages can overlap (2+ stages, 2+ groups, all on the CPU, a core each), threads elsewhere
    # (env={}: the suite's conftest sets STRATA_STAGE_WORKERS=thread for its own engines)
    two_groups = EngineConfig(split=2, batch=4, batch_groups=2, env={})
    expected = "dist" if (os.cpu_count() or 1) >= 2 else "thread"
    assert two_groups.stage_workers_for(["cpu", "cpu"]) == expected
    assert EngineConfig(split=2, batch=4, batch_groups="auto", env={}).stage_workers_for(["cpu", "cpu"]) == expected
    assert EngineConfig(split=2, batch=4, batch_groups=1, env={}).stage_workers_for(["cpu", "cpu"]) == "thread"
    assert EngineConfig(batch=4, batch_groups=2, env={}).stage_workers_for(["cpu"]) == "thread"  # one stage
    assert two_groups.stage_workers_for(["cuda:0", "cuda:1"]) == "thread"
    # STRATA_STAGE_WORKERS sets what auto picks; an explicit --stage-workers wins over it
    assert (
        EngineConfig(split=2, batch=4, batch_groups=2, env={"STRATA_STAGE_WORKERS": "thread"}).stage_workers_for(
            ["cpu", "cpu"]
        )
        == "thread"
    )
    assert (
        EngineConfig(split=2, batch=4, batch_groups=1, env={"STRATA_STAGE_WORKERS": "dist"}).stage_workers_for()
        == "dist"
    )
    assert EngineConfig(stage_workers="dist", env={"STRATA_STAGE_WORKERS": "thread"}).stage_workers_for() == "dist"
    with pytest.raises(ValueError, match="STRATA_STAGE_WORKERS='process' is not one of thread, dist"):
        EngineConfig(split=2, batch=4, env={"STRATA_STAGE_WORKERS": "process"}).stage_workers_for()


@pytest.fixture(scope="module")
def solo():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False, stage_workers="thread") as engine:
        return [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]


CASES = [
    ("2 ranks, 1 group", dict(split=2, batch_groups=1), {}),
    (
        "2 ranks, 2 groups, pieces of 2 chunks",
        dict(split=2, batch_groups=2),
        {"STRATA_PIPED_READ_PIECE": str(2 * CHUNK)},
    ),
    ("3 ranks, 2 groups, mixed read", dict(devices="cpu,cpu,cpu", batch_groups=2), {"STRATA_PIPED_READ_MIX": "1"}),
    (
        "3 ranks, 1 group, pieces of 1 chunk",
        dict(devices="cpu,cpu,cpu", batch_groups=1),
        {"STRATA_PIPED_READ_PIECE": str(CHUNK)},
    ),
    ("2 ranks, 2 groups, no row padding", dict(split=2, batch_groups=2), {"STRATA_ROW_TILE": "1"}),
]


@pytest.mark.slow
@pytest.mark.parametrize("label,layout,env", CASES, ids=[c[0] for c in CASES])
def test_tokens_equal_solo_and_the_thread_pipeline(solo, label, layout, env):
    outs = {}
    for workers in ("thread", "dist"):
        with Engine.from_pretrained(
            batch=4, prefill_chunk=CHUNK, threads=1, log_events=False, stage_workers=workers, env=env, **layout
        ) as engine:
            assert engine.info()["stage_workers"] == workers
            if "STRATA_ROW_TILE" in env:  # the measuring knob reaches the ranks as it reaches the threads
                assert engine.info()["row_tile"] == int(env["STRATA_ROW_TILE"]), workers
            outs[workers] = [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]
    for i, prompt in enumerate(PROMPTS):
        assert_tokens_equal(
            expected=solo[i],
            actual=outs["dist"][i],
            label=f"{label}, prompt {i}",
            expected_name="solo",
            actual_name="dist",
        )
        assert_tokens_equal(
            expected=outs["thread"][i],
            actual=outs["dist"][i],
            label=f"{label}, prompt {i}",
            expected_name="thread",
            actual_name="dist",
        )
