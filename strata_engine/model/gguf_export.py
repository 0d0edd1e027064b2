"""GGUF export: a byte-level qwen3_moe checkpoint (the embedded `strata-tiny-moe`) as a GGUF file that
llama.cpp serves with the same greedy tokens as Strata.

Contract: `export_gguf(model, out_path)` reads `config.json` and the safetensors of a model directory (or an
embedded model's name) and writes F32 tensors (the checkpoint's F16 values, widened exactly) under
llama.cpp's `qwen3moe` names, experts stacked per layer. The vocabulary is byte-level: token i < 256 is the
byte i, spelt in GPT-2's byte-to-unicode alphabet, so llama.cpp's BPE tokenizer (type "gpt2") turns text
into exactly our byte ids; 256 and 257 are <bos>/<eos> control tokens; no BOS is added (Strata adds none).
Needs the `gguf` package (vendored by llama.cpp; scripts/install_llama_cpp.sh installs it).
Run: `python -m strata_engine.model.gguf_export [MODEL] OUT.gguf`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ARCH = "qwen3moe"
_BYTES = 256
# llama.cpp refuses a "gpt2" vocabulary without a merges list and gguf refuses an empty array. Merges act
# on symbols that start as single characters; "<bos>" is never a symbol, so this merge never fires.
_INERT_MERGE = "<bos> <eos>"


class ExportError(ValueError):
    """A model this exporter cannot write faithfully; the message names what is unsupported."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (the alphabet llama.cpp's BPE vocab is spelt in)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = list(printable), 0
    for byte in range(_BYTES):
        if byte not in printable:
            printable.append(byte)
            chars.append(_BYTES + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def model_dir(name_or_path: str | Path) -> Path:
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    embedded = Path(__file__).resolve().parent.parent / "models" / str(name_or_path)
    if (embedded / "config.json").is_file():
        return embedded
    raise ExportError(f"model {str(name_or_path)!r}: not a directory with config.json nor an embedded model")


def _check(config: dict[str, Any]) -> None:
    if config.get("model_type") != "qwen3_moe":
        raise ExportError(f"model_type {config.get('model_type')!r}: only qwen3_moe is exported")
    if config.get("vocab_size") != _BYTES + 2 or config.get("bos_token_id") != 256 or config.get("eos_token_id") != 257:
        raise ExportError(
            "only the byte-level vocabulary (256 bytes, <bos> 256, <eos> 257) is exported; "
            f"got vocab_size {config.get('vocab_size')}"
        )
    if config.get("tie_word_embeddings") or config.get("attention_bias") or config.get("mlp_only_layers"):
        raise ExportError("tied embeddings, attention bias and dense-only layers are not exported")
    if (config.get("decoder_sparse_step") or 1) != 1 or config.get("shared_expert_intermediate_size"):
        raise ExportError("every layer must be MoE without a shared expert")
    if not config.get("norm_topk_prob", False):
        raise ExportError("llama.cpp's qwen3moe renormalises the top-k weights: norm_topk_prob must be true")


def _tensors(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{directory}: no *.safetensors")
    out: dict[str, np.ndarray] = {}
    for path in files:
        out.update(load_file(str(path)))
    return out


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if params.get("rope_type", "default") != "default":
        raise ExportError(f"rope type {params.get('rope_type')!r} is not exported")
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


DTYPES = ("f32", "f16")


def export_gguf(name_or_path: str | Path, out_path: str | Path, dtype: str = "f32") -> Path:
    """f32: every tensor widened exactly; f16: matrices in float16 (exact for a float16 checkpoint such as
    strata-tiny-moe), norms in float32 as llama.cpp's own converter writes them."""
    import gguf

    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r} is not exported (choose from {', '.join(DTYPES)})")

    directory = model_dir(name_or_path)
    config = json.loads((directory / "config.json").read_text())
    _check(config)
    hf = _tensors(directory)
    layers, experts = int(config["num_hidden_layers"]), int(config["num_experts"])
    writer = gguf.GGUFWriter(str(out_path), ARCH)
    writer.add_name(directory.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(layers)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_key_length(int(config["head_dim"]))
    writer.add_value_length(int(config["head_dim"]))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_expert_count(experts)
    writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    _vocab(writer, gguf)

    def put(name: str, array: np.ndarray) -> None:
        wide = np.float16 if dtype == "f16" and array.ndim >= 2 else np.float32
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=wide))

    put("token_embd.weight", hf.pop("model.embed_tokens.weight"))
    put("output_norm.weight", hf.pop("model.norm.weight"))
    put("output.weight", hf.pop("lm_head.weight"))
    names = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "self_attn.q_norm": "attn_q_norm",
        "self_attn.k_norm": "attn_k_norm",
        "mlp.gate": "ffn_gate_inp",
    }
    for i in range(layers):
        hf_layer = f"model.layers.{i}"
        for ours, theirs in names.items():
            put(f"blk.{i}.{theirs}.weight", hf.pop(f"{hf_layer}.{ours}.weight"))
        for proj, theirs in (
            ("gate_proj", "ffn_gate_exps"),
            ("up_proj", "ffn_up_exps"),
            ("down_proj", "ffn_down_exps"),
        ):
            # [experts, out, in]: llama.cpp's stacked expert layout
            put(
                f"blk.{i}.{theirs}.weight",
                np.stack([hf.pop(f"{hf_layer}.mlp.experts.{e}.{proj}.weight") for e in range(experts)]),
            )
    if hf:
        raise ExportError(f"tensors not exported: {', '.join(sorted(hf)[:5])}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out_path)


def _vocab(writer: Any, gguf: Any) -> None:
    alphabet = bytes_to_unicode()
    tokens = [alphabet[b] for b in range(_BYTES)] + ["<bos>", "<eos>"]
    types = [gguf.TokenType.NORMAL] * _BYTES + [gguf.TokenType.CONTROL] * 2
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([_INERT_MERGE])
    writer.add_bos_token_id(256)
    writer.add_eos_token_id(257)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m strata_engine.model.gguf_export [MODEL] OUT.gguf", file=sys.stderr)
        return 2
    model, out = (args[0], args[1]) if len(args) == 2 else ("strata-tiny-moe", args[0])
    try:
        path = export_gguf(model, out)
    except ExportError as exc:
        print(f"gguf export: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
