"""Where a model is: a folder holding config.json, or the name of one shipped in strata_engine/models; and its config.

Contract: `resolve_model_path(name_or_path)` is that folder (a ValueError names the embedded models where it is
neither); `read_config(folder)` its ModelConfig. The engine reads both once, at its start (resolved.py), and
builds the model from them (weights.build_model); `weights.load_model(name_or_path)` does all three.
"""

from __future__ import annotations

import json
from pathlib import Path

from .config import ModelConfig

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def embedded_models() -> list[str]:
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file()) if MODELS_DIR.is_dir() else []


def resolve_model_path(name_or_path: str | Path) -> Path:
    """A directory holding config.json, or the name of a model shipped inside strata_engine/models."""
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    embedded = MODELS_DIR / str(name_or_path)
    if "/" not in str(name_or_path) and (embedded / "config.json").is_file():
        return embedded
    raise ValueError(
        f"model {str(name_or_path)!r} not found: not a directory with config.json and not an embedded model "
        f"(embedded: {', '.join(embedded_models()) or 'none'})"
    )


def read_config(model_dir: Path) -> ModelConfig:
    with open(model_dir / "config.json") as f:
        return ModelConfig.from_hf(json.load(f))
