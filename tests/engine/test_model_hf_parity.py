"""Our forward against transformers on the same tiny random checkpoints (the oracle), per architecture."""

from __future__ import annotations

import pytest
import torch

from helpers import ARCHITECTURES, greedy
from tokens_equal import assert_tokens_equal
from strata_engine.model.kv_cache import KVCache
from strata_engine.model import load_model

PROMPT_LEN, NEW_TOKENS = 24, 32


def prompt(seed: int = 1) -> list[int]:
    return torch.randint(0, 96, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_logits_match_transformers(arch, hf_checkpoint):
    directory, hf = hf_checkpoint(arch)
    model, config = load_model(directory)
    assert config.architecture == arch
    ids = torch.tensor([prompt()])
    with torch.no_grad():
        expected = hf(ids).logits[0]
    kv = KVCache(config, num_slots=3, ctx=64)
    with torch.inference_mode():
        actual = model(ids, torch.arange(PROMPT_LEN)[None], kv, torch.tensor([2]))[0]
    assert actual.dtype == torch.float32
    assert actual.shape == expected.shape
    diff = (actual - expected).abs().max().item()
    assert diff < 1e-4, f"{arch}: max |ours - transformers| over all positions = {diff:.3g}"


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("chunk", [1, 5, PROMPT_LEN])
def test_greedy_matches_transformers_generate(arch, chunk, hf_checkpoint):
    directory, hf = hf_checkpoint(arch)
    model, _ = load_model(directory)
    ids = prompt(seed=2)
    with torch.no_grad():
        expected = hf.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
        )
    expected = expected[0, PROMPT_LEN:].tolist()
    assert len(set(expected)) > 3, (
        f"{arch}: the oracle's continuation is degenerate {expected}; the test would prove little"
    )
    actual = greedy(model, ids, NEW_TOKENS, chunk=chunk)
    assert_tokens_equal(
        expected=expected,
        actual=actual,
        label=f"{arch} chunk={chunk}",
        expected_name="transformers",
        actual_name="strata",
    )
