"""llama.cpp's `llama-server` as an engine we did not write: where the binary is, and a command line for it.

`scripts/install_llama_cpp.sh` builds the binary from the source llama-cpp-python's sdist vendors, into
`${XDG_CACHE_HOME:-~/.cache}/strata/llama.cpp-<version>/build/bin/llama-server`; `STRATA_LLAMA_SERVER`
names another. `server_command` gives an arm or `--engine` command with `{host}`/`{port}` placeholders:
N parallel slots (continuous batching), each with `ctx_per_slot` tokens of its own KV cache.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

VERSION = "0.3.36"  # the llama-cpp-python release whose vendored llama.cpp the install script builds
ENV_VAR = "STRATA_LLAMA_SERVER"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "strata" / f"llama.cpp-{VERSION}"


def find_llama_server() -> Path | None:
    """The llama-server binary: $STRATA_LLAMA_SERVER, the install script's build, or one on PATH."""
    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named) if Path(named).is_file() else None
    built = cache_dir() / "build" / "bin" / "llama-server"
    if built.is_file():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


def server_command(
    binary: Path | str,
    gguf: Path | str,
    *,
    slots: int = 6,
    ctx_per_slot: int = 8192,
    threads: int | None = None,
    arch: str = "qwen3moe",
) -> str:
    """`llama-server` serving `gguf` on {host}:{port} with `slots` slots of `ctx_per_slot` tokens each.

    The per-slot KV caches are separate (`--no-kv-unified`), so every slot holds `ctx_per_slot` tokens;
    a slot longer than the model's trained context is capped by the server, so the command raises the
    trained length in the GGUF's metadata (`--override-kv <arch>.context_length`) to match.
    """
    if slots < 1 or ctx_per_slot < 1:
        raise ValueError(f"slots and ctx_per_slot must be >= 1, got {slots} and {ctx_per_slot}")
    parts = [
        str(binary),
        "-m",
        str(gguf),
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--parallel",
        str(slots),
        "-c",
        str(slots * ctx_per_slot),
        "--no-kv-unified",
        "--no-webui",
        "--no-warmup",
        "--override-kv",
        f"{arch}.context_length=int:{ctx_per_slot}",
    ]
    if threads:
        parts += ["--threads", str(threads), "--threads-batch", str(threads)]
    return " ".join(shlex.quote(p) if p not in ("{host}", "{port}") else p for p in parts)
