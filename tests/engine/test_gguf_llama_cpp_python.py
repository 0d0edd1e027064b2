"""Our greedy tokens equal llama.cpp's on the model exported to GGUF, f32 and f16, run in process through
llama-cpp-python (skipped, naming the install command, where it or the `gguf` package is missing)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from strata_bench.engines.llama_cpp_python import INSTALL, InProcessLlama

GOLDEN = Path(__file__).resolve().parents[2] / "strata_verify" / "golden" / "reference-cpu.json"

pytest.importorskip("gguf", reason="the gguf package comes with llama.cpp: bash scripts/install_llama_cpp.sh")
# Asked without importing it: llama_cpp's import opens two /dev/null files it never closes (llama_cpp/_utils.py),
# and every test process that collected this file printed "ResourceWarning: unclosed file" at its exit.
if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip(f"llama-cpp-python is not installed: {INSTALL}", allow_module_level=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_llama_cpp_python_gives_our_greedy_tokens_on_the_exported_gguf(tmp_path, dtype):
    from strata_engine.model.gguf_export import export_gguf

    gguf = export_gguf("strata-tiny-moe", tmp_path / f"tiny-{dtype}.gguf", dtype)
    golden = json.loads(GOLDEN.read_text())  # our engine's greedy answers (checked against it in CI)
    llama = InProcessLlama(gguf, ctx=1024)
    try:
        for answer in golden["answers"]:
            _, tokens = llama.greedy(list(answer["prompt"].encode()), golden["max_tokens"])
            assert tokens == answer["token_ids"], f"{dtype}: {answer['name']}"
    finally:
        llama.close()
    if dtype == "f16":  # matrices stored as float16: half the f32 file
        assert gguf.stat().st_size < 0.6 * export_gguf("strata-tiny-moe", tmp_path / "tiny-f32.gguf").stat().st_size
