"""Sliding-window attention (qwen3_moe `use_sliding_window`, mixtral `sliding_window`) against transformers:
prompts longer than the window, read whole, in chunks and token by token, equal the oracle; a model whose
window is ignored does not (the negative control), and an architecture we cannot window is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from helpers import COMMON, INIT_RANGE, greedy
from tokens_equal import assert_tokens_equal
from strata_engine.model import load_model
from strata_engine.model.config import ModelConfig
from strata_engine.model.transformer import Transformer
from strata_engine.model.kv_cache import KVCache

WINDOW, PROMPT_LEN, NEW_TOKENS = 8, 40, 24


def windowed_checkpoint(arch: str, directory):
    from transformers import AutoModelForCausalLM, MixtralConfig, Qwen3MoeConfig

    if arch == "qwen3_moe":
        config = Qwen3MoeConfig(
            **COMMON,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            head_dim=16,
            norm_topk_prob=True,
            initializer_range=INIT_RANGE,
            use_sliding_window=True,
            sliding_window=WINDOW,
        )
    else:
        config = MixtralConfig(
            **COMMON, num_local_experts=4, num_experts_per_tok=2, initializer_range=INIT_RANGE, sliding_window=WINDOW
        )
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    hf.save_pretrained(directory)
    return hf


def prompt() -> list[int]:
    return torch.randint(0, 96, (PROMPT_LEN,), generator=torch.Generator().manual_seed(3)).tolist()


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_windowed_logits_match_transformers_and_the_window_matters(arch, tmp_path):
    hf = windowed_checkpoint(arch, tmp_path)
    model, config = load_model(tmp_path)
    assert config.sliding_window == WINDOW
    ids = torch.tensor([prompt()])
    with torch.no_grad():
        expected = hf(ids).logits[0]
    with torch.inference_mode():
        actual = model(ids, torch.arange(PROMPT_LEN)[None], KVCache(config, 1, 64), torch.tensor([0]))[0]
        unwindowed = Transformer(dataclasses.replace(config, sliding_window=None))
        unwindowed.load_state_dict(model.state_dict())
        full = unwindowed(ids, torch.arange(PROMPT_LEN)[None], KVCache(config, 1, 64), torch.tensor([0]))[0]
    diff = (actual - expected).abs().max().item()
    assert diff < 1e-4, f"{arch}: max |ours - transformers| = {diff:.3g} with a {WINDOW}-token window"
    # Negative control: inside the window both agree; past it, attention over everything differs.
    assert torch.equal(full[:WINDOW], actual[:WINDOW])
    assert (full[WINDOW:] - actual[WINDOW:]).abs().max().item() > 1e-3


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
@pytest.mark.parametrize("chunk", [1, 5, PROMPT_LEN])
def test_windowed_greedy_matches_transformers_generate(arch, chunk, tmp_path):
    hf = windowed_checkpoint(arch, tmp_path)
    model, _ = load_model(tmp_path)
    ids = prompt()
    with torch.no_grad():
        expected = hf.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
        )
    expected = expected[0, PROMPT_LEN:].tolist()
    actual = greedy(model, ids, NEW_TOKENS, chunk=chunk)
    assert_tokens_equal(
        expected=expected,
        actual=actual,
        label=f"{arch} window={WINDOW} chunk={chunk}",
        expected_name="transformers",
        actual_name="strata",
    )


def test_a_window_we_cannot_honour_is_refused():
    d = {
        "model_type": "llama",
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "use_sliding_window": True,
        "sliding_window": 8,
    }
    with pytest.raises(ValueError, match="sliding_window attention is not supported for llama"):
        ModelConfig.from_hf(d)


def test_the_window_round_trips_through_the_hf_config(tmp_path):
    windowed_checkpoint("qwen3_moe", tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["use_sliding_window"] is True and written["sliding_window"] == WINDOW
    from strata_engine.model.weights import hf_config_dict

    _, config = load_model(tmp_path)
    again = hf_config_dict(config)
    assert again["use_sliding_window"] is True and again["sliding_window"] == WINDOW
