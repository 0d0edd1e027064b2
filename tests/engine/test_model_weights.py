"""Loading HF checkpoints: layouts (per-expert, fused, sharded, tied), exports, and errors that name the tensor."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import save_hf_checkpoint
from strata_engine.model.kv_cache import KVCache
from strata_engine.model import load_model, resolve_model_path
from strata_engine.model.config import ModelConfig
from strata_engine.model.transformer import Transformer
from strata_engine.model.model_dir import embedded_models
from strata_engine.model.weights import hf_config_dict, save_hf_weights


def last_logits(model, ids):
    kv = KVCache(model.config, num_slots=1, ctx=len(ids))
    with torch.inference_mode():
        return model(torch.tensor([ids]), torch.arange(len(ids))[None], kv, torch.tensor([0]))[0, -1]


IDS = [5, 17, 3, 90, 41, 8, 8, 60]


def copy_checkpoint(src, dst):
    shutil.copytree(src, dst)
    return dst, load_file(str(dst / "model.safetensors"))


def test_fused_expert_layout_loads_the_same(hf_checkpoint, tmp_path):
    for arch, prefix, names in [
        ("qwen3_moe", "mlp", ("gate_proj", "up_proj", "down_proj")),
        ("mixtral", "block_sparse_moe", ("w1", "w3", "w2")),
    ]:
        src, _ = hf_checkpoint(arch)
        directory, tensors = copy_checkpoint(src, tmp_path / arch)
        config = json.loads((directory / "config.json").read_text())
        experts = config.get("num_local_experts") or config["num_experts"]
        for layer in range(config["num_hidden_layers"]):
            base = f"model.layers.{layer}.{prefix}.experts"
            gate = [tensors.pop(f"{base}.{e}.{names[0]}.weight") for e in range(experts)]
            up = [tensors.pop(f"{base}.{e}.{names[1]}.weight") for e in range(experts)]
            down = [tensors.pop(f"{base}.{e}.{names[2]}.weight") for e in range(experts)]
            tensors[f"{base}.gate_up_proj"] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up)])  # [E, 2I, D]
            tensors[f"{base}.down_proj"] = torch.stack(down)  # [E, D, I]
        save_file(tensors, str(directory / "model.safetensors"))
        torch.testing.assert_close(
            last_logits(load_model(directory)[0], IDS), last_logits(load_model(src)[0], IDS), rtol=0, atol=0
        )


def test_sharded_checkpoint(tmp_path):
    hf = save_hf_checkpoint("qwen2_moe", tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    model, _ = load_model(tmp_path)
    with torch.no_grad():
        expected = hf(torch.tensor([IDS])).logits[0, -1]
    torch.testing.assert_close(last_logits(model, IDS), expected, rtol=0, atol=1e-4)


def test_tied_embeddings(tmp_path):
    from transformers import AutoModelForCausalLM

    from helpers import hf_config

    config = hf_config("llama")
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).eval()
    hf.save_pretrained(tmp_path)
    model, ours = load_model(tmp_path)
    assert ours.tie_word_embeddings and model.lm_head.weight is model.embed_tokens.weight
    with torch.no_grad():
        expected = hf(torch.tensor([IDS])).logits[0, -1]
    torch.testing.assert_close(last_logits(model, IDS), expected, rtol=0, atol=1e-4)


def test_our_export_loads_in_transformers(tmp_path):
    """save_hf_weights + hf_config_dict (what the trainer writes) is a checkpoint transformers reads as we do."""
    from transformers import AutoModelForCausalLM

    config = ModelConfig(
        architecture="qwen3_moe",
        vocab_size=40,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        qk_norm=True,
        moe_layers=(0, 1),
        rope_theta=500.0,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = Transformer(config)
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.2)
    save_hf_weights(model, tmp_path, torch.float32)
    (tmp_path / "config.json").write_text(json.dumps(hf_config_dict(config)))
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = [1, 7, 30, 2, 2, 9]
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(last_logits(model, ids), expected, rtol=0, atol=1e-4)
    reloaded, reloaded_config = load_model(tmp_path)
    assert reloaded_config == config
    torch.testing.assert_close(last_logits(reloaded, ids), last_logits(model, ids), rtol=0, atol=0)


def test_bfloat16_keeps_rotary_in_float32(hf_checkpoint):
    model, _ = load_model(hf_checkpoint("llama")[0], dtype="bfloat16")
    assert model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.layers[0].self_attn.rotary.inv_freq.dtype == torch.float32
    assert last_logits(model, IDS).dtype == torch.float32


def test_unknown_architecture(hf_checkpoint, tmp_path):
    directory, _ = copy_checkpoint(hf_checkpoint("llama")[0], tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config.update(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"])
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unknown architecture 'gpt_neox'"):
        load_model(directory)


@pytest.mark.parametrize(
    "edit, message",
    [
        ("missing", r"missing tensor model\.layers\.1\.self_attn\.k_proj\.weight \(expected shape \[16, 32\]\)"),
        (
            "shape",
            r"tensor model\.layers\.0\.mlp\.experts\.2\.up_proj\.weight has shape \[25, 32\], expected \[24, 32\]",
        ),
        ("unexpected", r"unexpected tensor model\.layers\.0\.mlp\.surprise\.weight"),
    ],
)
def test_bad_tensors_are_named(edit, message, hf_checkpoint, tmp_path):
    directory, tensors = copy_checkpoint(hf_checkpoint("qwen2_moe")[0], tmp_path / "m")
    if edit == "missing":
        del tensors["model.layers.1.self_attn.k_proj.weight"]
    elif edit == "shape":
        tensors["model.layers.0.mlp.experts.2.up_proj.weight"] = torch.zeros(25, 32)
    else:
        tensors["model.layers.0.mlp.surprise.weight"] = torch.zeros(2)
    save_file(tensors, str(directory / "model.safetensors"))
    with pytest.raises(ValueError, match=message):
        load_model(directory)


def test_no_weights_file(tmp_path, hf_checkpoint):
    shutil.copy(hf_checkpoint("llama")[0] / "config.json", tmp_path / "config.json")
    with pytest.raises(ValueError, match="no model.safetensors"):
        load_model(tmp_path)


def test_resolve_model_path(tmp_path):
    with pytest.raises(ValueError, match=r"model 'no-such-model' not found.*embedded: ") as info:
        resolve_model_path("no-such-model")
    for name in embedded_models():
        assert name in str(info.value)
        assert (resolve_model_path(name) / "config.json").is_file()
    with pytest.raises(ValueError, match="not found"):
        resolve_model_path(tmp_path)  # a directory without config.json
