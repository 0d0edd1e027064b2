"""Shared test helpers for the model tests: tiny HF checkpoints and a greedy loop over our forward."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pytest
import torch

from strata_engine.model.config import ModelConfig
from strata_engine.model.kv_cache import KVCache
from strata_engine.model.transformer import MoE, Transformer

ARCHITECTURES = ("llama", "mixtral", "qwen2_moe", "qwen3_moe")
COMMON = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
# Random init with initializer_range 0.02 gives near-uniform logits (ties decide greedy tokens); a larger
# range makes each step's top-1 stand clear of the rest, as in a trained model.
INIT_RANGE = 0.25


def hf_config(arch: str):
    from transformers import LlamaConfig, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig

    if arch == "llama":
        return LlamaConfig(**COMMON, initializer_range=INIT_RANGE)
    if arch == "mixtral":
        return MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2, initializer_range=INIT_RANGE)
    if arch == "qwen2_moe":
        return Qwen2MoeConfig(
            **COMMON,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=40,
            initializer_range=INIT_RANGE,
        )
    if arch == "qwen3_moe":
        return Qwen3MoeConfig(
            **COMMON,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            head_dim=16,
            norm_topk_prob=True,
            initializer_range=INIT_RANGE,
        )
    raise ValueError(arch)


def save_hf_checkpoint(arch: str, directory: Path, seed: int = 0, **save_kwargs):
    """Build a random HF model of `arch`, save_pretrained it to `directory`, return the HF model (eval, fp32)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(arch), attn_implementation="eager").eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(directory, **save_kwargs)
    return model


def greedy(
    model: Transformer,
    prompt: Sequence[int],
    new_tokens: int,
    chunk: int,
    slot: int = 0,
    num_slots: int = 1,
    ctx: int | None = None,
) -> list[int]:
    """Read the prompt in chunks of `chunk` tokens into `slot`, then decode `new_tokens` greedy tokens."""
    ctx = ctx or len(prompt) + new_tokens
    kv = KVCache(model.config, num_slots, ctx, torch.float32, "cpu")
    slots = torch.tensor([slot])
    with torch.inference_mode():
        for start in range(0, len(prompt), chunk):
            ids = list(prompt[start : start + chunk])
            logits = model(torch.tensor([ids]), torch.arange(start, start + len(ids))[None], kv, slots)
        out = [int(logits[0, -1].argmax())]
        while len(out) < new_tokens:
            pos = len(prompt) + len(out) - 1
            logits = model(torch.tensor([[out[-1]]]), torch.tensor([[pos]]), kv, slots)
            out.append(int(logits[0, -1].argmax()))
    return out


def native_op_or_skip(getter: Callable[..., Callable | None], what: str, march: str | None = None) -> Callable:
    """A native op (runtime/native/build.py) for its tests, built here for `march` (None: this machine's
    own, kernel_switches.native_march), or the test skips saying why it could not be."""
    from strata_engine.kernel_switches import native_march

    op = getter(march=march or native_march())  # the op itself, whatever this machine's verdict serves
    if op is None:
        if march is not None:
            pytest.skip(f"the native {what} did not build for {march} here (stderr says why)")
        pytest.skip(f"the native {what} could not be built here (no C++ compiler or ninja)")
    return op


def native_op_fixtures(switch: str, getter: Callable[..., Callable | None], what: str) -> tuple[Callable, Callable]:
    """The two fixtures of a native op's test file, bound there as `the_op_serves, native = ...`: its switch
    (the env variable `switch`) at 1 for every test, and the op itself (native_op_or_skip), built once a module."""

    @pytest.fixture(autouse=True, name="the_op_serves")
    def the_op_serves(monkeypatch):
        """These tests are of the op: it serves whatever this machine's race chose (a test sets 0 itself)."""
        monkeypatch.setenv(switch, "1")

    @pytest.fixture(scope="module", name="native")
    def native():
        """The op, built once a module (or its tests skip)."""
        return native_op_or_skip(getter, what)

    return the_op_serves, native


def random_moe(experts: int, top_k: int, seed: int, hidden: int = 64, inter: int = 48) -> MoE:
    """One qwen3_moe MoE layer (hidden 64, expert width 48 by default) with random weights of scale 0.3."""
    config = ModelConfig(
        architecture="qwen3_moe",
        vocab_size=16,
        hidden_size=hidden,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        intermediate_size=96,
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=inter,
        norm_topk_prob=True,
        max_position_embeddings=64,
    )
    moe = MoE(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in moe.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.3)
    return moe
