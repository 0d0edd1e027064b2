"""ModelConfig.from_hf: the families' config.json quirks, and refusals for features we do not implement."""

from __future__ import annotations

import pytest

from strata_engine.model.config import ModelConfig

BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    max_position_embeddings=128,
)


def test_llama_defaults_and_rope_theta_locations():
    c = ModelConfig.from_hf(
        {**BASE, "model_type": "llama", "rope_parameters": {"rope_theta": 500.0, "rope_type": "default"}}
    )
    assert (c.architecture, c.head_dim, c.num_experts, c.rope_theta, c.moe_layers) == ("llama", 8, 0, 500.0, ())
    old = ModelConfig.from_hf({**BASE, "architectures": ["LlamaForCausalLM"], "rope_theta": 123.0})  # transformers 4.x
    assert old.rope_theta == 123.0


def test_qwen3_moe_expert_count_under_either_key_and_dense_layers():
    for key in ("num_experts", "num_local_experts"):  # transformers 5 writes num_local_experts
        c = ModelConfig.from_hf(
            {
                **BASE,
                "model_type": "qwen3_moe",
                key: 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 16,
                "head_dim": 16,
                "mlp_only_layers": [1],
                "decoder_sparse_step": 1,
            }
        )
        assert (c.num_experts, c.head_dim, c.qk_norm, c.moe_layers) == (8, 16, True, (0, 2, 3))
    stepped = ModelConfig.from_hf(
        {
            **BASE,
            "model_type": "qwen2_moe",
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "decoder_sparse_step": 2,
            "shared_expert_intermediate_size": 24,
        }
    )
    assert stepped.moe_layers == (1, 3) and stepped.attention_bias and stepped.shared_expert_intermediate_size == 24


def test_mixtral_experts_use_intermediate_size_and_renormalise():
    c = ModelConfig.from_hf(
        {
            **BASE,
            "model_type": "mixtral",
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "head_dim": None,
            "eos_token_id": [2, 7],
        }
    )
    assert (c.moe_intermediate_size, c.norm_topk_prob, c.moe_layers, c.eos_token_id) == (48, True, (0, 1, 2, 3), 2)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "unknown architecture 'gpt2'"),
        ({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
        ({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 1.0}}, "rope_type 'llama3'"),
        (
            {
                "model_type": "qwen2_moe",
                "use_sliding_window": True,
                "sliding_window": 64,
                "num_experts": 2,
                "num_experts_per_tok": 1,
                "moe_intermediate_size": 8,
            },
            "sliding_window",
        ),
        ({"model_type": "llama", "attention_bias": True}, "attention_bias"),
        ({"model_type": "llama", "hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"model_type": "llama", "num_key_value_heads": 3}, "multiple of num_kv_heads"),
        ({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3}, "num_experts_per_tok must be in"),
    ],
)
def test_refusals_name_the_field(extra, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf({**BASE, **extra})
