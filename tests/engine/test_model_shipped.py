"""The embedded default model: it loads, it writes Python-looking text with clear margins, transformers
reads the same directory and agrees, batching does not change its tokens, and (with CUDA) bf16 is close."""

from __future__ import annotations

import pytest
import torch

from helpers import greedy
from tokens_equal import assert_tokens_equal
from strata_engine.model.kv_cache import KVCache
from strata_engine.model import load_model, load_tokenizer, resolve_model_path
from strata_engine.model.tokenizer import HFTokenizer

NAME = "strata-tiny-moe"
PROMPT = "import os\n\n\ndef read_config(path):\n    "


@pytest.fixture(scope="module")
def shipped():
    return load_model(NAME)


def test_loads_as_documented(shipped):
    model, config = shipped
    assert config.architecture == "qwen3_moe" and config.num_layers % 2 == 0 and config.is_moe
    assert config.max_position_embeddings >= 8192 and config.vocab_size == 258
    assert next(model.parameters()).dtype == torch.float32
    tok = load_tokenizer(resolve_model_path(NAME), config)
    assert isinstance(tok, HFTokenizer) and tok.eos_token_id == 257  # the shipped byte-level tokenizer.json


def test_greedy_text_is_not_degenerate_and_margins_are_clear(shipped):
    model, config = shipped
    ids = list(PROMPT.encode())
    kv = KVCache(config, num_slots=1, ctx=len(ids) + 64)
    out, margins = [], []
    with torch.inference_mode():
        logits = model(torch.tensor([ids]), torch.arange(len(ids))[None], kv, torch.tensor([0]))[0, -1]
        for _ in range(64):
            top = logits.topk(2)
            margins.append(float(top.values[0] - top.values[1]))
            out.append(int(top.indices[0]))
            logits = model(torch.tensor([[out[-1]]]), torch.tensor([[len(ids) + len(out) - 1]]), kv, torch.tensor([0]))[
                0, -1
            ]
    text = bytes(t for t in out if t < 256).decode("utf-8", errors="replace")
    assert len(set(out)) >= 8, f"degenerate continuation: {text!r}"
    assert max(text.count(c) for c in set(text)) < 0.6 * len(text), f"one character dominates: {text!r}"
    assert sum(c.isalpha() for c in text) >= 10, f"no words in {text!r}"
    margins.sort()
    assert margins[len(margins) // 2] > 0.5, (
        f"median top-1/top-2 margin {margins[len(margins) // 2]:.3f} is too small: {text!r}"
    )


@pytest.mark.parametrize("chunk", [4, 16])
def test_chunking_and_slot_do_not_change_tokens(shipped, chunk):
    model, _ = shipped
    ids = list(PROMPT.encode())
    whole = greedy(model, ids, 24, chunk=len(ids))
    assert_tokens_equal(
        expected=whole,
        actual=greedy(model, ids, 24, chunk=chunk, slot=1, num_slots=2),
        label=f"{NAME} chunk={chunk}",
        expected_name="whole prompt",
        actual_name=f"chunks of {chunk}",
    )


def test_transformers_reads_the_shipped_directory(shipped):
    from transformers import AutoModelForCausalLM

    model, _ = shipped
    hf = AutoModelForCausalLM.from_pretrained(resolve_model_path(NAME), dtype=torch.float32).eval()
    ids = list(PROMPT.encode())
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    kv = KVCache(model.config, num_slots=1, ctx=len(ids))
    with torch.inference_mode():
        actual = model(torch.tensor([ids]), torch.arange(len(ids))[None], kv, torch.tensor([0]))[0]
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_close_to_cpu_fp32(shipped):
    cpu_model, config = shipped
    gpu_model, _ = load_model(NAME, device="cuda", dtype=torch.bfloat16)
    ids = list(PROMPT.encode())
    positions = torch.arange(len(ids))[None]
    with torch.inference_mode():
        expected = cpu_model(torch.tensor([ids]), positions, KVCache(config, 1, len(ids)), torch.tensor([0]))[0]
        kv = KVCache(config, 1, len(ids), dtype=torch.bfloat16, device="cuda")
        actual = gpu_model(torch.tensor([ids], device="cuda"), positions.cuda(), kv, torch.tensor([0], device="cuda"))[
            0
        ].cpu()
    assert actual.dtype == torch.float32
    agree = (actual.argmax(-1) == expected.argmax(-1)).float().mean().item()
    cosine = torch.nn.functional.cosine_similarity(actual, expected, dim=-1).min().item()
    assert agree >= 0.9 and cosine > 0.99, (
        f"bf16 on CUDA vs fp32 on CPU: top-1 agreement {agree:.2%}, min cosine {cosine:.4f}"
    )
