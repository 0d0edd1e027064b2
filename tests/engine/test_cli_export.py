"""`strata-engine export --gguf`: the real console script writes a GGUF file llama.cpp can read, says what
llama.cpp will not honour (the sliding window), and names a missing dependency or an unsupported model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

EXE = shutil.which("strata-engine", path=os.path.dirname(sys.executable)) or shutil.which("strata-engine")
pytestmark = [
    pytest.mark.skipif(EXE is None, reason="the strata-engine console script is not installed"),
    pytest.mark.slow,
]  # the CLI in a subprocess writing whole GGUF files


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, "export", *args], capture_output=True, text=True, timeout=300)


def test_export_writes_a_gguf_file_and_names_the_window_llama_cpp_ignores(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package comes with llama.cpp: bash scripts/install_llama_cpp.sh")
    out = tmp_path / "tiny.gguf"
    result = export("--gguf", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out) and out.read_bytes()[:4] == b"GGUF"
    assert "applies no sliding window" in result.stderr and "1024 tokens" in result.stderr


def test_export_f16_halves_the_file_and_an_unknown_dtype_is_refused(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package comes with llama.cpp: bash scripts/install_llama_cpp.sh")
    f32, f16 = tmp_path / "f32.gguf", tmp_path / "f16.gguf"
    assert export("--gguf", str(f32)).returncode == 0
    assert export("--gguf", str(f16), "--dtype", "f16").returncode == 0
    assert 0.4 < f16.stat().st_size / f32.stat().st_size < 0.6
    refused = export("--gguf", str(tmp_path / "x.gguf"), "--dtype", "q4_0")
    assert refused.returncode == 2 and "'q4_0' is not one of 'f32', 'f16'" in refused.stderr


def test_an_unsupported_model_is_refused_naming_why(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package comes with llama.cpp: bash scripts/install_llama_cpp.sh")
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 258}))
    result = export("--gguf", str(tmp_path / "x.gguf"), "--model", str(model))
    assert result.returncode == 1 and "only qwen3_moe is exported" in result.stderr
