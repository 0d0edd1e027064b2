"""ModelConfig: the architecture facts our transformer needs, read from a Hugging Face config.json.

Four families are supported: llama (dense), mixtral, qwen2_moe (shared expert, q/k/v bias) and qwen3_moe
(per-head q/k norm). `ModelConfig.from_hf` accepts the dict of a config.json as transformers 4.x or 5.x
writes it and refuses, with a message naming the field, anything our forward would silently get wrong
(rope scaling, biases we do not implement, an unknown architecture, and a sliding window on llama or
qwen2_moe). Sliding windows are implemented where every layer has one: mixtral's `sliding_window` and
qwen3_moe's with `use_sliding_window` (the embedded model: 1,024 positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ARCHITECTURES = ("llama", "mixtral", "qwen2_moe", "qwen3_moe")
HF_CLASS_NAMES = {
    "llama": "LlamaForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}
_CLASS_TO_ARCH = {cls: arch for arch, cls in HF_CLASS_NAMES.items()}


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (llama layers, qwen moe "mlp_only_layers")
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    num_experts: int = 0  # 0 = dense
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True  # renormalise the top-k router weights to sum to 1 (mixtral always does)
    shared_expert_intermediate_size: int = 0  # qwen2_moe: a sigmoid-gated dense expert beside the routed ones
    attention_bias: bool = False  # qwen2: bias on q/k/v (not o)
    qk_norm: bool = False  # qwen3: RMSNorm over head_dim on q and k before rope
    moe_layers: tuple[int, ...] = field(default=())  # indices of layers whose MLP is the routed MoE
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    sliding_window: int | None = None  # every layer's query at p sees keys (p - W, p]; None = all of 0..p

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.architecture!r}; supported: {', '.join(ARCHITECTURES)}")
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1 or None, got {self.sliding_window}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError(f"rms_norm_eps and rope_theta must be > 0, got {self.rms_norm_eps}, {self.rope_theta}")
        if self.num_experts < 0:
            raise ValueError(f"num_experts must be >= 0, got {self.num_experts}")
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ValueError(
                    f"num_experts_per_tok must be in [1, num_experts={self.num_experts}], got {self.num_experts_per_tok}"
                )
            if self.moe_intermediate_size < 1:
                raise ValueError(
                    f"moe_intermediate_size must be >= 1 for an MoE model, got {self.moe_intermediate_size}"
                )
        elif self.moe_layers:
            raise ValueError(f"moe_layers {self.moe_layers} given for a dense model (num_experts=0)")
        if any(not 0 <= i < self.num_layers for i in self.moe_layers):
            raise ValueError(f"moe_layers {self.moe_layers} outside [0, num_layers={self.num_layers})")
        if len(self.moe_layers) < self.num_layers and self.intermediate_size < 1:
            raise ValueError(f"intermediate_size must be >= 1 when some layer is dense, got {self.intermediate_size}")
        if self.shared_expert_intermediate_size and self.architecture != "qwen2_moe":
            raise ValueError(f"shared_expert_intermediate_size is a qwen2_moe feature, not {self.architecture}")
        if self.qk_norm and self.architecture != "qwen3_moe":
            raise ValueError(f"qk_norm is a qwen3_moe feature, not {self.architecture}")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def layer_is_moe(self, layer: int) -> bool:
        return layer in self.moe_layers

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> "ModelConfig":
        """Build from a config.json dict. Unknown architecture or an unsupported feature -> ValueError."""
        arch = _architecture(d)
        hidden, heads = int(d["hidden_size"]), int(d["num_attention_heads"])
        layers = int(d["num_hidden_layers"])
        _refuse_unsupported(arch, d)
        experts = int(d.get("num_local_experts") or d.get("num_experts") or 0) if arch != "llama" else 0
        if arch == "mixtral":
            moe_layers = tuple(range(layers))
            moe_inter = int(d["intermediate_size"])  # mixtral experts use intermediate_size
            norm_topk = True
        elif arch in ("qwen2_moe", "qwen3_moe"):
            step = int(d.get("decoder_sparse_step", 1) or 1)
            only_dense = set(d.get("mlp_only_layers") or [])
            moe_layers = tuple(i for i in range(layers) if experts > 0 and i not in only_dense and (i + 1) % step == 0)
            moe_inter = int(d.get("moe_intermediate_size", 0))
            norm_topk = bool(d.get("norm_topk_prob", False))
        else:
            moe_layers, moe_inter, norm_topk = (), 0, False
        return cls(
            architecture=arch,
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or hidden // heads),
            intermediate_size=int(d.get("intermediate_size", 0)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(d),
            max_position_embeddings=int(d.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            num_experts=experts if moe_layers else 0,
            num_experts_per_tok=int(d.get("num_experts_per_tok", 0)) if moe_layers else 0,
            moe_intermediate_size=moe_inter if moe_layers else 0,
            norm_topk_prob=norm_topk,
            shared_expert_intermediate_size=int(d.get("shared_expert_intermediate_size") or 0)
            if arch == "qwen2_moe"
            else 0,
            attention_bias=bool(d.get("qkv_bias", True)) if arch == "qwen2_moe" else False,
            qk_norm=arch == "qwen3_moe",
            moe_layers=moe_layers,
            bos_token_id=_single_id(d.get("bos_token_id")),
            eos_token_id=_single_id(d.get("eos_token_id")),
            sliding_window=_sliding_window(arch, d),
        )


def _architecture(d: dict[str, Any]) -> str:
    model_type = d.get("model_type")
    if model_type in ARCHITECTURES:
        return model_type
    for cls_name in d.get("architectures") or ():
        if cls_name in _CLASS_TO_ARCH:
            return _CLASS_TO_ARCH[cls_name]
    named = model_type or (d.get("architectures") or ["<none>"])[0]
    raise ValueError(
        f"unknown architecture {named!r} (model_type={model_type!r}, architectures={d.get('architectures')}); supported: {', '.join(ARCHITECTURES)}"
    )


def _rope_theta(d: dict[str, Any]) -> float:
    # transformers 5 nests rope settings in rope_parameters; 4.x wrote rope_theta at the top level.
    params = d.get("rope_parameters") or {}
    return float(params.get("rope_theta", d.get("rope_theta", 10000.0)))


def _refuse_unsupported(arch: str, d: dict[str, Any]) -> None:
    """Features that change the math and that our forward does not implement: refuse, never ignore."""
    scaling = d.get("rope_scaling") or {}
    rope_type = (
        (d.get("rope_parameters") or {}).get("rope_type")
        or scaling.get("rope_type")
        or scaling.get("type")
        or "default"
    )
    if rope_type != "default":
        raise ValueError(f"rope_type {rope_type!r} is not supported (only 'default' rotary embeddings)")
    if d.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {d['hidden_act']!r} is not supported (only 'silu')")
    sliding_layers = [t for t in d.get("layer_types") or () if t == "sliding_attention"]
    if arch in ("llama", "qwen2_moe") and (d.get("use_sliding_window") or sliding_layers):
        # qwen2_moe windows only the layers past max_window_layers; llama has none: refuse, never ignore
        raise ValueError(
            f"sliding_window attention is not supported for {arch} (only qwen3_moe and mixtral, every layer)"
        )
    if arch in ("llama", "qwen3_moe", "mixtral") and d.get("attention_bias"):
        raise ValueError(f"attention_bias=True is not supported for {arch}")
    if d.get("mlp_bias"):
        raise ValueError("mlp_bias=True is not supported")
    if int(d.get("pretraining_tp", 1) or 1) != 1:
        raise ValueError(f"pretraining_tp={d['pretraining_tp']} is not supported")


def _sliding_window(arch: str, d: dict[str, Any]) -> int | None:
    """The window every layer uses, as transformers reads it: mixtral's `sliding_window`; qwen3_moe's only
    with `use_sliding_window` (then on every layer)."""
    if arch == "mixtral" or (arch == "qwen3_moe" and d.get("use_sliding_window")):
        value = d.get("sliding_window")
        return None if value is None else int(value)
    return None


def _single_id(value: Any) -> int | None:
    if isinstance(value, list):  # several eos ids: our engine stops on one; take the first
        return int(value[0]) if value else None
    return None if value is None else int(value)
