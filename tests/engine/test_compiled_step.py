"""The compiled decode step (runtime/compiled_step.py): greedy tokens equal to the eager step's and to
transformers' (dense, MoE, a shared expert, a sliding window, the shipped model), a row's logits
bitwise the same alone and beside other rows, every other part left to the eager forward, the context
limit still enforced, the engine's --compile on thread stages and on stage ranks, and the thread pipeline's
whole decode (every layer in one compiled call) bitwise equal to the stage-by-stage step."""

from __future__ import annotations

import pytest
import torch

from helpers import greedy, native_op_or_skip
from test_model_sliding_window import windowed_checkpoint
from tokens_equal import assert_tokens_equal
from strata_engine import Engine, SamplingParams
from strata_engine.config import EngineConfig
from strata_engine.model import load_model
from strata_engine.runtime import step_ops
from strata_engine.runtime.compiled_step import CompiledDecode, buckets
from strata_engine.runtime.native import decode_experts
from strata_engine.runtime.invariance import apply_row_tile, row_tile_for
from strata_engine.model.kv_cache import ContextOverflowError, KVCache
from strata_engine.runtime.pipeline import MicroBatch, Part, Pipeline
from strata_engine.runtime.stage_plan import plan_stages
from strata_engine.runtime.stage_forward import stage_forward
from strata_engine.runtime_config import RuntimeConfig

pytestmark = pytest.mark.slow  # torch.compile: seconds per engine (README's fast command skips it; .ci/run runs it)

PROMPTS = [[5, 17, 33, 2, 9, 41, 8], [60, 1, 1, 22, 3], [7, 7, 7, 70, 12, 30, 31, 4, 19]]


def decode(model, prompts, steps: int, compiled: bool, ctx: int = 64, tile: int | None = None, gemms: str = "aten"):
    """Read each prompt into its slot, then decode every row together `steps` times; -> (tokens per row, last logits)."""
    tile = row_tile_for(model.config) if tile is None else tile
    apply_row_tile(model, tile)
    layers = range(model.config.num_layers)
    kv = KVCache(model.config, num_slots=len(prompts), ctx=ctx)
    step = (
        CompiledDecode(model, layers, kv, True, True, tile, len(prompts), threads=1, gemms=gemms) if compiled else None
    )
    out: list[list[int]] = [[] for _ in prompts]
    with torch.inference_mode():
        for slot, ids in enumerate(prompts):
            part = Part.ragged([(slot, 0, ids)], want_logits=True)
            stage_forward(model, layers, kv, part, True, True, tile, "cpu", step)
            out[slot].append(int(part.logits[0].argmax()))
        for _ in range(steps):
            rows = [(slot, len(ids) + len(out[slot]) - 1, [out[slot][-1]]) for slot, ids in enumerate(prompts)]
            part = Part.ragged(rows, want_logits=True)
            stage_forward(model, layers, kv, part, True, True, tile, "cpu", step)
            for slot, token in enumerate(part.logits.argmax(-1).tolist()):
                out[slot].append(token)
    return out, part.logits


@pytest.mark.parametrize("arch", ["llama", "qwen2_moe", "qwen3_moe"])
def test_compiled_tokens_equal_eager_and_transformers(arch, hf_checkpoint):
    directory, hf = hf_checkpoint(arch)
    model = load_model(directory)[0]
    eager, _ = decode(model, PROMPTS, 12, compiled=False)
    compiled, _ = decode(model, PROMPTS, 12, compiled=True)
    assert compiled == eager
    for slot, ids in enumerate(PROMPTS):
        with torch.inference_mode():
            oracle = hf.generate(torch.tensor([ids]), max_new_tokens=13, do_sample=False)[0, len(ids) :].tolist()
        assert_tokens_equal(
            expected=oracle,
            actual=compiled[slot],
            label=f"{arch} row {slot}: compiled step vs transformers",
            expected_name="transformers",
            actual_name="compiled",
        )


def test_compiled_step_keeps_the_sliding_window(tmp_path):
    hf = windowed_checkpoint("qwen3_moe", tmp_path)
    model = load_model(tmp_path)[0]
    prompt = [(7 * i + 3) % 90 for i in range(20)]  # longer than the window of 8: decode slices the last keys
    compiled, _ = decode(model, [prompt], 16, compiled=True)
    with torch.inference_mode():
        oracle = hf.generate(torch.tensor([prompt]), max_new_tokens=17, do_sample=False)[0, len(prompt) :].tolist()
    assert_tokens_equal(
        expected=oracle,
        actual=compiled[0],
        label="compiled step, window 8",
        expected_name="transformers",
        actual_name="compiled",
    )
    assert compiled[0] == greedy(model, prompt, 17, chunk=len(prompt))


def test_shipped_model_tokens_equal_eager():
    model = load_model("strata-tiny-moe")[0]
    prompts = [list(b"def main():\n    "), list(b"import os\nimport "), list(b"class Point:\n")]
    eager, _ = decode(model, prompts, 24, compiled=False)
    compiled, _ = decode(model, prompts, 24, compiled=True)
    assert compiled == eager


@pytest.mark.parametrize("switch", ["1", "0"])
def test_the_decode_experts_give_the_eager_tokens(monkeypatch, switch):
    """With the native decode experts (each row through its chosen experts only) and without them (every
    expert on every row): the eager step's greedy tokens, over one row and six (the 8-row graph)."""
    monkeypatch.setenv(decode_experts.ENV, switch)
    if switch == "1":
        native_op_or_skip(decode_experts.native_decode_experts, "decode experts")
    model = load_model("strata-tiny-moe")[0]
    calls = []
    monkeypatch.setattr(
        step_ops, "native_decode_experts", lambda: _counted(calls, decode_experts.native_decode_experts())
    )
    prompts = [list(b"x = 1\n"), list(b"while True:"), list(b"#"), list(b"import os"), list(b"def f("), list(b"for i")]
    for rows in (prompts[:1], prompts):
        compiled, _ = decode(model, rows, 10, compiled=True)
        assert compiled == decode(model, rows, 10, compiled=False)[0]
    assert (len(calls) > 0) == (switch == "1"), f"the op was called {len(calls)} times with its switch at {switch}"


def _counted(calls: list, op):
    if op is None:
        return None

    def counted(*args):
        calls.append(1)
        return op(*args)

    return counted


def test_a_rows_logits_do_not_depend_on_the_rows_beside_it():
    model = load_model("strata-tiny-moe")[0]
    target = list(b"for i in range(")
    alone, logits_alone = decode(model, [target], 6, compiled=True)
    for others in ([list(b"x = 1\n")], [list(b"x = 1\n"), list(b"while True:"), list(b"#")]):
        beside, logits = decode(model, others + [target], 6, compiled=True)
        assert beside[-1] == alone[0]
        assert torch.equal(logits[-1], logits_alone[0]), f"beside {len(others)} row(s): the target's logits moved"


def test_template_gemms_give_the_eager_tokens():
    """Inductor's C++ GEMM templates (STRATA_COMPILED_GEMMS=template) over six rows (the 8-row graph): the
    greedy tokens of the eager step. Their kernels do not keep a row's bits independent of its place in the
    micro-batch (measured: the same row first or sixth of six differs in the last bits), so the engine claims
    no batch invariance with them (backends.build_torch)."""
    model = load_model("strata-tiny-moe")[0]
    prompts = [
        list(b"x = 1\n"),
        list(b"while True:"),
        list(b"#"),
        list(b"import os"),
        list(b"def f("),
        list(b"for i in range("),
    ]
    compiled, _ = decode(model, prompts, 12, compiled=True, tile=4, gemms="template")
    eager, _ = decode(model, prompts, 12, compiled=False, tile=4)
    assert compiled == eager


def test_only_decode_rows_take_the_compiled_step():
    model = load_model("strata-tiny-moe")[0]
    apply_row_tile(model, 16)
    kv = KVCache(model.config, num_slots=3, ctx=32)
    step = CompiledDecode(model, range(model.config.num_layers), kv, True, True, 16, 3, threads=1)
    assert step.graphs == 1 and step.compile_s > 0
    assert kv.committed_bytes() in (0, None), "the warm-up's writes went back to the OS"
    with torch.inference_mode():
        assert not step.run(Part.ragged([(0, 0, [1, 2, 3])], want_logits=True)), "a prompt chunk"
        assert not step.run(Part.ragged([(0, 3, [4, 5]), (1, 0, [6])], want_logits=True)), "a chunk beside a decode row"
        assert step.run(Part.ragged([(0, 3, [4]), (1, 0, [6])], want_logits=True))
        with pytest.raises(ContextOverflowError):
            step.run(Part.ragged([(2, 32, [4])], want_logits=True))


def test_buckets_bound_the_graphs():
    assert set(buckets(6, 16).values()) == {16}
    assert buckets(40, 16)[17] == 32 and len(set(buckets(40, 16).values())) == 3
    assert buckets(6, 1) == {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 6: 8}


def test_compile_needs_the_torch_executor():
    with pytest.raises(ValueError, match="--compile"):
        EngineConfig(executor="sim", compile=True)


@pytest.mark.parametrize("workers", ["thread", "dist"])
def test_engine_compile_gives_the_eager_engines_text(workers):
    prompts = ["def add(a, b):", "import sys\n", "class Stack:", "# a comment"]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    with Engine.from_pretrained(batch=4, batch_groups=2, split=2, stage_workers="thread") as engine:
        eager = [o.text for o in engine.generate(prompts, params)]
    with Engine.from_pretrained(batch=4, batch_groups=2, split=2, stage_workers=workers, compile=True) as engine:
        info = engine.info()
        compiled = [o.text for o in engine.generate(prompts, params)]
    # one bucket on each of two stages, and on thread stages the whole decode's (every layer in one graph)
    assert info["compiled"]["graphs"] == (3 if workers == "thread" else 2), info["compiled"]
    assert info["batch_invariant"]
    assert compiled == eager


def test_the_mixed_read_with_the_compiled_step_claims_no_invariance(monkeypatch):
    """Its decode rows ride eager forwards during a read and the compiled step otherwise: not bitwise one path."""
    monkeypatch.setenv("STRATA_PIPED_READ_MIX", "1")
    with Engine.from_pretrained(batch=2, batch_groups=2, split=2, stage_workers="thread", compile=True) as engine:
        assert engine.info()["read_mix"] and not engine.info()["batch_invariant"]


def test_the_whole_decode_gives_the_stage_by_stage_bits():
    """Into an empty thread pipeline, decode rows run every layer in one compiled call on the first stage's
    thread; a micro-batch sent behind another, or a prompt chunk, goes stage by stage. Same rows, same bits."""
    model, config = load_model("strata-tiny-moe")
    pipeline = Pipeline(
        model,
        plan_stages(config.num_layers, None, ["cpu", "cpu"], "cpu"),
        4,
        64,
        torch.float32,
        RuntimeConfig(threads=1, compile=True),
    )
    try:
        assert pipeline.batch_invariant
        with torch.inference_mode():
            prompts = [MicroBatch([Part.ragged([(slot, 0, PROMPTS[slot % 3])], True)]) for slot in range(4)]
            for mb in prompts:
                pipeline.submit(mb)
            assert [mb.whole for mb in pipeline.drain()] == [False] * 4, "prompt chunks go stage by stage"
            tokens = [int(mb.parts[0].logits[0].argmax()) for mb in prompts]
            for step in range(6):
                rows = [(slot, len(PROMPTS[slot % 3]) + step, [tokens[slot]]) for slot in range(4)]
                whole, staged = MicroBatch([Part.ragged(rows, True)]), MicroBatch([Part.ragged(rows, True)])
                pipeline.submit(whole)
                pipeline.submit(staged)  # behind the first: stage by stage (it writes the same keys again)
                assert pipeline.drain() == [whole, staged] and whole.whole and not staged.whole
                assert whole.error is None and staged.error is None
                assert len(whole.stage_ms) == 1 and len(staged.stage_ms) == 2
                assert torch.equal(whole.parts[0].logits, staged.parts[0].logits), f"step {step}: the bits moved"
                tokens = whole.parts[0].logits.argmax(-1).tolist()
    finally:
        pipeline.close()
