"""The model: config (ModelConfig from an HF config.json), transformer (the forward), weights (HF
checkpoints in and out, embedded models), tokenizer (bytes or tokenizer.json, streaming decode)."""

from .config import ModelConfig
from .tokenizer import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from .transformer import Block, Transformer
from .model_dir import embedded_models, resolve_model_path
from .weights import load_model

__all__ = [
    "ModelConfig",
    "Transformer",
    "Block",
    "load_model",
    "resolve_model_path",
    "embedded_models",
    "Tokenizer",
    "ByteTokenizer",
    "HFTokenizer",
    "load_tokenizer",
]
