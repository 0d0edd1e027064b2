"""Weights: Hugging Face checkpoints in, our Transformer out (and back, for the trainer).

`load_model(name_or_path)` reads config.json (model_dir.py) and `build_model` model.safetensors or a sharded
model.safetensors.index.json: it maps every HF tensor onto our fused layout (q/k/v in one projection,
gate/up in one, experts stacked [E, ...]) and accepts experts saved per expert (`experts.E.gate_proj`,
mixtral's `block_sparse_moe.experts.E.w1`) or fused (`experts.gate_up_proj [E, 2I, D]`). A missing,
unexpected or wrongly shaped tensor is a ValueError that names the tensor (and both shapes).
"""

from __future__ import annotations

import contextlib

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .. import mkl_mode
from .config import HF_CLASS_NAMES, ModelConfig
from .model_dir import read_config, resolve_model_path
from .transformer import Transformer

# Tensors some exporters write that carry nothing we need (rotary tables are recomputed).
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    if dtype is None:  # full precision where it is cheap (CPU), bf16 on accelerators
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def load_model(
    path_or_name: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None
) -> tuple[Transformer, ModelConfig]:
    model_dir = resolve_model_path(path_or_name)
    config = read_config(model_dir)
    return build_model(model_dir, config, device, dtype), config


def build_model(
    model_dir: Path, config: ModelConfig, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None
) -> Transformer:
    """Our Transformer from the weights in `model_dir`, whose config.json `config` was read from (model_dir.py)."""
    mkl_mode.pin()  # before this model's first GEMM: bits independent of the thread count (mkl_mode.py)
    device = torch.device(device)
    dtype = resolve_dtype(dtype, device)
    state = to_our_state_dict(read_safetensors(model_dir), config)
    with torch.device("meta"), _without_init():
        model = Transformer(config)
    model = model.to_empty(device=device).to(dtype)
    model.tie_weights()
    model.load_state_dict(state, strict=True)
    return model.eval().requires_grad_(False)


@contextlib.contextmanager
def _without_init():
    """Modules built without their random init, as the weights are loaded next. On the meta device the init
    is no work, but it runs through torch's reference ops, which import its compiler (~90 MB resident)."""
    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for n in names:
        setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        with open(index) as f:
            weight_map: dict[str, str] = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    elif (model_dir / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        with safe_open(model_dir / name, framework="pt", device="cpu") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors


class _Source:
    """The HF tensors of one checkpoint, taken by name with shape checks; leftovers are reported."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors, self.taken = tensors, set()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in self.tensors:
            raise ValueError(f"missing tensor {name} (expected shape {list(shape)})")
        tensor = self.tensors[name]
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"tensor {name} has shape {list(tensor.shape)}, expected {list(shape)}")
        self.taken.add(name)
        return tensor.float() if tensor.dtype != torch.float32 else tensor

    def leftovers(self) -> list[str]:
        return sorted(k for k in self.tensors if k not in self.taken and not k.endswith(_IGNORED_SUFFIXES))


def to_our_state_dict(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    src, c = _Source(hf), config
    d, hd, q_dim, kv_dim = c.hidden_size, c.head_dim, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    out = {
        "embed_tokens.weight": src.take("model.embed_tokens.weight", (c.vocab_size, d)),
        "norm.weight": src.take("model.norm.weight", (d,)),
    }
    if c.tie_word_embeddings:
        if src.has("lm_head.weight"):  # some exporters write the tied copy anyway
            src.take("lm_head.weight", (c.vocab_size, d))
        out["lm_head.weight"] = out["embed_tokens.weight"]
    else:
        out["lm_head.weight"] = src.take("lm_head.weight", (c.vocab_size, d))
    for i in range(c.num_layers):
        hf_layer, ours = f"model.layers.{i}", f"layers.{i}"
        out[f"{ours}.input_layernorm.weight"] = src.take(f"{hf_layer}.input_layernorm.weight", (d,))
        out[f"{ours}.post_attention_layernorm.weight"] = src.take(f"{hf_layer}.post_attention_layernorm.weight", (d,))
        attn = f"{hf_layer}.self_attn"
        out[f"{ours}.self_attn.qkv_proj.weight"] = torch.cat(
            [
                src.take(f"{attn}.q_proj.weight", (q_dim, d)),
                src.take(f"{attn}.k_proj.weight", (kv_dim, d)),
                src.take(f"{attn}.v_proj.weight", (kv_dim, d)),
            ]
        )
        if c.attention_bias:
            out[f"{ours}.self_attn.qkv_proj.bias"] = torch.cat(
                [
                    src.take(f"{attn}.q_proj.bias", (q_dim,)),
                    src.take(f"{attn}.k_proj.bias", (kv_dim,)),
                    src.take(f"{attn}.v_proj.bias", (kv_dim,)),
                ]
            )
        out[f"{ours}.self_attn.o_proj.weight"] = src.take(f"{attn}.o_proj.weight", (d, q_dim))
        if c.qk_norm:
            out[f"{ours}.self_attn.q_norm.weight"] = src.take(f"{attn}.q_norm.weight", (hd,))
            out[f"{ours}.self_attn.k_norm.weight"] = src.take(f"{attn}.k_norm.weight", (hd,))
        if c.layer_is_moe(i):
            out.update(_moe_tensors(src, c, hf_layer, f"{ours}.mlp"))
        else:
            out.update(
                _mlp_tensors(
                    src, f"{hf_layer}.mlp", f"{ours}.mlp", d, c.intermediate_size, ("gate_proj", "up_proj", "down_proj")
                )
            )
    extra = src.leftovers()
    if extra:
        raise ValueError(
            f"unexpected tensor {extra[0]} ({len(extra)} unexpected in all: {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''})"
        )
    return out


def _mlp_tensors(
    src: _Source, hf: str, ours: str, d: int, inter: int, names: tuple[str, str, str]
) -> dict[str, torch.Tensor]:
    gate, up, down = names
    return {
        f"{ours}.gate_up_proj.weight": torch.cat(
            [src.take(f"{hf}.{gate}.weight", (inter, d)), src.take(f"{hf}.{up}.weight", (inter, d))]
        ),
        f"{ours}.down_proj.weight": src.take(f"{hf}.{down}.weight", (d, inter)),
    }


def _moe_tensors(src: _Source, c: ModelConfig, hf_layer: str, ours: str) -> dict[str, torch.Tensor]:
    d, inter, experts = c.hidden_size, c.moe_intermediate_size, c.num_experts
    # mixtral checkpoints name the block `block_sparse_moe`; transformers 5 internals call it `mlp`.
    prefix = (
        f"{hf_layer}.block_sparse_moe" if src.has(f"{hf_layer}.block_sparse_moe.gate.weight") else f"{hf_layer}.mlp"
    )
    out = {f"{ours}.gate.weight": src.take(f"{prefix}.gate.weight", (experts, d))}
    if src.has(f"{prefix}.experts.gate_up_proj"):  # fused layout
        out[f"{ours}.gate_up_proj"] = src.take(f"{prefix}.experts.gate_up_proj", (experts, 2 * inter, d))
        out[f"{ours}.down_proj"] = src.take(f"{prefix}.experts.down_proj", (experts, d, inter))
    else:
        names = (
            ("w1", "w3", "w2") if src.has(f"{prefix}.experts.0.w1.weight") else ("gate_proj", "up_proj", "down_proj")
        )
        per_expert = [_mlp_tensors(src, f"{prefix}.experts.{e}", "x", d, inter, names) for e in range(experts)]
        out[f"{ours}.gate_up_proj"] = torch.stack([t["x.gate_up_proj.weight"] for t in per_expert])
        out[f"{ours}.down_proj"] = torch.stack([t["x.down_proj.weight"] for t in per_expert])
    if c.shared_expert_intermediate_size:
        shared = _mlp_tensors(
            src,
            f"{prefix}.shared_expert",
            f"{ours}.shared_expert",
            d,
            c.shared_expert_intermediate_size,
            ("gate_proj", "up_proj", "down_proj"),
        )
        out.update(shared)
        out[f"{ours}.shared_expert_gate.weight"] = src.take(f"{prefix}.shared_expert_gate.weight", (1, d))
    return out


def to_hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our parameters under HF names, experts per expert (the layout save_pretrained writes)."""
    c, ours = model.config, model.state_dict()
    q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    hf = {"model.embed_tokens.weight": ours["embed_tokens.weight"], "model.norm.weight": ours["norm.weight"]}
    if not c.tie_word_embeddings:
        hf["lm_head.weight"] = ours["lm_head.weight"]
    for i in range(c.num_layers):
        o, h = f"layers.{i}", f"model.layers.{i}"
        hf[f"{h}.input_layernorm.weight"] = ours[f"{o}.input_layernorm.weight"]
        hf[f"{h}.post_attention_layernorm.weight"] = ours[f"{o}.post_attention_layernorm.weight"]
        for part in ("weight", "bias") if c.attention_bias else ("weight",):
            q, k, v = ours[f"{o}.self_attn.qkv_proj.{part}"].split([q_dim, kv_dim, kv_dim])
            (
                hf[f"{h}.self_attn.q_proj.{part}"],
                hf[f"{h}.self_attn.k_proj.{part}"],
                hf[f"{h}.self_attn.v_proj.{part}"],
            ) = q, k, v
        hf[f"{h}.self_attn.o_proj.weight"] = ours[f"{o}.self_attn.o_proj.weight"]
        if c.qk_norm:
            hf[f"{h}.self_attn.q_norm.weight"] = ours[f"{o}.self_attn.q_norm.weight"]
            hf[f"{h}.self_attn.k_norm.weight"] = ours[f"{o}.self_attn.k_norm.weight"]
        if not c.layer_is_moe(i):
            gate, up = ours[f"{o}.mlp.gate_up_proj.weight"].chunk(2)
            hf.update(
                {
                    f"{h}.mlp.gate_proj.weight": gate,
                    f"{h}.mlp.up_proj.weight": up,
                    f"{h}.mlp.down_proj.weight": ours[f"{o}.mlp.down_proj.weight"],
                }
            )
            continue
        prefix, names = (
            (f"{h}.block_sparse_moe", ("w1", "w3", "w2"))
            if c.architecture == "mixtral"
            else (f"{h}.mlp", ("gate_proj", "up_proj", "down_proj"))
        )
        hf[f"{prefix}.gate.weight"] = ours[f"{o}.mlp.gate.weight"]
        for e in range(c.num_experts):
            gate, up = ours[f"{o}.mlp.gate_up_proj"][e].chunk(2)
            hf[f"{prefix}.experts.{e}.{names[0]}.weight"], hf[f"{prefix}.experts.{e}.{names[1]}.weight"] = gate, up
            hf[f"{prefix}.experts.{e}.{names[2]}.weight"] = ours[f"{o}.mlp.down_proj"][e]
        if c.shared_expert_intermediate_size:
            gate, up = ours[f"{o}.mlp.shared_expert.gate_up_proj.weight"].chunk(2)
            hf[f"{prefix}.shared_expert.gate_proj.weight"], hf[f"{prefix}.shared_expert.up_proj.weight"] = gate, up
            hf[f"{prefix}.shared_expert.down_proj.weight"] = ours[f"{o}.mlp.shared_expert.down_proj.weight"]
            hf[f"{prefix}.shared_expert_gate.weight"] = ours[f"{o}.mlp.shared_expert_gate.weight"]
    return hf


def save_hf_weights(model: Transformer, model_dir: Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write model.safetensors (HF names, `dtype`) into model_dir; config.json is the caller's to write."""
    model_dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in to_hf_state_dict(model).items()}
    path = model_dir / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def hf_config_dict(config: ModelConfig) -> dict:
    """config.json for `config` as transformers writes it (architectures/model_type), for our own exports."""
    c = config
    d = {
        "architectures": [HF_CLASS_NAMES[c.architecture]],
        "model_type": c.architecture,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps,
        "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"},
        "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "use_cache": True,
    }
    if c.architecture == "mixtral":
        d.update(
            num_local_experts=c.num_experts,
            num_experts_per_tok=c.num_experts_per_tok,
            intermediate_size=c.moe_intermediate_size,
            sliding_window=c.sliding_window,
        )
    elif c.architecture in ("qwen2_moe", "qwen3_moe"):
        dense = [i for i in range(c.num_layers) if not c.layer_is_moe(i)]
        d.update(
            num_experts=c.num_experts,
            num_experts_per_tok=c.num_experts_per_tok,
            moe_intermediate_size=c.moe_intermediate_size,
            norm_topk_prob=c.norm_topk_prob,
            decoder_sparse_step=1,
            mlp_only_layers=dense,
            use_sliding_window=c.sliding_window is not None,
            sliding_window=c.sliding_window,
        )
        if c.architecture == "qwen2_moe":
            d.update(shared_expert_intermediate_size=c.shared_expert_intermediate_size, qkv_bias=c.attention_bias)
            d.pop("attention_bias")
    return d
