"""Fixtures for the model tests: one tiny random HF checkpoint per architecture, built once per session."""

from __future__ import annotations

import pytest

from helpers import save_hf_checkpoint


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """hf_checkpoint(arch) -> (checkpoint dir, the HF model it holds); built on first use."""
    built = {}

    def get(arch: str):
        if arch not in built:
            directory = tmp_path_factory.mktemp(f"hf_{arch}")
            built[arch] = (directory, save_hf_checkpoint(arch, directory))
        return built[arch]

    return get
