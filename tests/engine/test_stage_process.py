"""The process-per-stage pipeline: same logits and tokens as the thread pipeline, errors per micro-batch,
a dead stage is an error and not a hang, and nothing is left running after close()."""
from __future__ import annotations

import dataclasses
import os
import signal

import pytest
import torch

from strata_engine import SamplingParams
from strata_engine.config import EngineConfig
from strata_engine.engine import Engine
from strata_engine.model.rows import Rows
from strata_engine.model.weights import load_model
from strata_engine.runtime.pipeline import MicroBatch, Part, Pipeline, plan_stages, split_layers
from strata_engine.runtime.stage_process import ProcessPipeline, StageError, StageProcessError, _from_wire, _to_wire

MODEL = "strata-tiny-moe"
PROMPTS = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n        self.",
           "for i in range(10):\n"]
GREEDY = SamplingParams(max_tokens=16, ignore_eos=True)
STAGES = plan_stages(4, 2, (), "cpu")


def assert_same_tokens(*, expected, actual, label):
    index = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), None)
    if index is None and len(expected) != len(actual):
        index = min(len(expected), len(actual))
    assert index is None, f"{label}: first difference at token {index}: expected={expected[index:index + 4]} actual={actual[index:index + 4]}"


def prompt_part(slot: int = 0, length: int = 5, start: int = 0) -> Part:
    return Part.uniform(torch.arange(1, length + 1)[None, :], torch.arange(start, start + length)[None, :], torch.tensor([slot]), True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def pipelines():
    """The same two stages as processes and as threads, one thread each (so the same kernels run)."""
    procs = ProcessPipeline(MODEL, STAGES, num_slots=4, ctx=64, dtype=torch.float32, threads=1)
    model, _ = load_model(MODEL, dtype=torch.float32)
    split_layers(model, STAGES, torch.float32)
    threads = Pipeline(model, STAGES, num_slots=4, ctx=64, dtype=torch.float32, threads=1)
    yield procs, threads
    procs.close()
    threads.close()


def test_logits_equal_the_thread_pipeline_bit_for_bit(pipelines):
    procs, threads = pipelines
    results = []
    for pipeline in (procs, threads):
        pipeline.submit(MicroBatch([prompt_part(slot=1, length=3), prompt_part(slot=2, length=1)], tag="read"))
        pipeline.submit(MicroBatch([Part.uniform(torch.tensor([[7], [9]]), torch.tensor([[3], [1]]), torch.tensor([1, 2]), True)],
                                   tag="decode"))
        assert pipeline.in_flight == 2
        results.append(pipeline.drain())
        assert pipeline.in_flight == 0
    for got, want in zip(*results):
        assert got.tag == want.tag and got.error is None and want.error is None
        for part_got, part_want in zip(got.parts, want.parts):
            assert part_got.hidden is None
            assert torch.equal(part_got.logits, part_want.logits), f"{got.tag}: logits differ"
    assert len(results[0][0].stage_ms) == 2  # one timing per stage


def test_a_stage_error_fails_that_micro_batch_only(pipelines):
    procs, _ = pipelines
    procs.submit(MicroBatch([prompt_part(slot=9)], tag="bad slot"))
    procs.submit(MicroBatch([prompt_part(slot=0, length=1, start=63), prompt_part(slot=1, length=2, start=63)], tag="overflow"))
    procs.submit(MicroBatch([prompt_part(slot=3)], tag="fine"))
    bad, overflow, fine = procs.drain()
    assert isinstance(bad.error, ValueError) and "slot 9 out of range" in str(bad.error)
    # ContextOverflowError cannot be rebuilt from its message alone: it comes back as a StageError naming it
    assert isinstance(overflow.error, StageError)
    assert "ContextOverflowError" in str(overflow.error) and "position 64" in str(overflow.error)
    assert fine.error is None and fine.parts[0].logits.shape == (1, 258)


def test_bfloat16_crosses_the_wire_unchanged():
    t = torch.randn(2, 3, 4).to(torch.bfloat16)
    back = _from_wire(_to_wire(t))
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)


def test_a_dead_stage_is_an_error_not_a_hang():
    pipeline = ProcessPipeline(MODEL, STAGES, num_slots=2, ctx=32, dtype=torch.float32, threads=1)
    try:
        pipeline.submit(MicroBatch([prompt_part()]))
        assert pipeline.get().error is None
        os.kill(pipeline._procs[1].pid, signal.SIGKILL)
        pipeline.submit(MicroBatch([prompt_part()], tag="in flight"))
        mb = pipeline.get()
        assert isinstance(mb.error, StageProcessError) and "strata-stage-1" in str(mb.error), mb.error
        pipeline.submit(MicroBatch([prompt_part()], tag="later"))
        assert isinstance(pipeline.get().error, StageProcessError)
    finally:
        pipeline.close()
    assert all(not alive(p.pid) for p in pipeline._procs)


def test_a_stage_that_cannot_load_the_model_says_why(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(StageProcessError, match="failed to start"):
        ProcessPipeline(str(tmp_path), STAGES, num_slots=1, ctx=16, dtype=torch.float32, threads=1)


def test_stage_workers_config():
    with pytest.raises(ValueError, match="stage_workers must be one of auto, thread, process, got 'fibers'"):
        EngineConfig(stage_workers="fibers")
    assert EngineConfig(stage_workers="process").stage_workers_for(["cpu", "cpu"]) == "process"
    assert EngineConfig(stage_workers="thread").stage_workers_for(["cpu", "cpu"]) == "thread"
    assert EngineConfig().stage_workers_for(["cuda:0", "cuda:1"]) == "thread"


def test_engine_tokens_equal_solo_and_threads_and_errors_are_contained(monkeypatch):
    with Engine.from_pretrained(batch=1, log_events=False, stage_workers="thread") as engine:
        solo = [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]
    with Engine.from_pretrained(batch=4, batch_groups=2, split=2, prefill_chunk=8, threads=1, log_events=False,
                                stage_workers="thread") as engine:
        threaded = [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]
    engine = Engine.from_pretrained(batch=4, batch_groups=2, split=2, prefill_chunk=8, threads=1, log_events=False,
                                    stage_workers="process")
    pids = [p.pid for p in engine.executor.pipeline._procs]
    with engine:
        assert engine.info()["stage_workers"] == "process"
        processed = [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]
        for i, prompt in enumerate(PROMPTS):
            assert_same_tokens(expected=solo[i], actual=processed[i], label=f"solo vs process, prompt {prompt!r}")
            assert_same_tokens(expected=threaded[i], actual=processed[i], label=f"thread vs process, prompt {prompt!r}")

        # A read whose part names a slot the stages do not have: the stage raises, the request fails alone.
        read_part = engine.executor._read_part
        poison = engine.tokenizer.encode("POISON")

        def poisoned(request, start, end):
            part = read_part(request, start, end)
            if request.prompt_ids == poison:
                part.rows = Rows(tuple(dataclasses.replace(row, slot=99) for row in part.rows.rows), part.rows.padded)
            return part

        monkeypatch.setattr(engine.executor, "_read_part", poisoned)
        bad = engine.submit(poison, GREEDY)
        good = engine.submit(PROMPTS[0], GREEDY)
        failed = bad.result(timeout=60)
        assert failed.finish_reason == "error" and "slot 99 out of range" in failed.error, failed
        assert_same_tokens(expected=solo[0], actual=good.result(timeout=60).token_ids, label="served after the error")
        assert_same_tokens(expected=solo[1], actual=engine.generate([PROMPTS[1]], GREEDY)[0].token_ids,
                           label="served after the error, new request")
    assert pids and not any(alive(pid) for pid in pids), "stage processes outlived the engine"
