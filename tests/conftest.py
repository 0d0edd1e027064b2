"""Fixtures every suite shares: llama.cpp's `llama-server` and the embedded model as GGUF, for the tests
against an engine this project did not write (bench and verify alike)."""
from __future__ import annotations

import pytest

LLAMA_INSTALL = "run `bash scripts/install_llama_cpp.sh` to build it"


@pytest.fixture(scope="session")
def llama_gguf(tmp_path_factory):
    """(llama-server binary, GGUF of strata-tiny-moe); skips, naming the install command, where either is missing."""
    from strata_bench.engines.llama_cpp import find_llama_server

    binary = find_llama_server()
    if binary is None:
        pytest.skip(f"llama.cpp's llama-server is not built: {LLAMA_INSTALL}")
    pytest.importorskip("gguf", reason=f"the gguf package is missing: {LLAMA_INSTALL}")
    from strata_engine.model.gguf_export import export_gguf

    return binary, export_gguf("strata-tiny-moe", tmp_path_factory.mktemp("gguf") / "strata-tiny-moe.gguf")
