"""The native ops' switches: which path serves each op, and the ISA level the ops are built for.

Contract: `kernel_mode(name)` reads one op's variable (`KERNEL_ENVS`): auto or unset = the faster of the op
and ATen's calls as measured on this machine (runtime/native/choice.py), 1 = the op, 0 = ATen's calls;
anything else raises naming the variable (knobs.py parses both). `native_march()` is g++'s -march for every op (default
native); `cache_dir()` is where per-machine verdicts are kept; `keep_compile_cache()` (the command line's,
before an engine is built) puts inductor's compile cache there too, a folder per ATen vector level
(`compile_cache_dir`), unless TORCHINDUCTOR_CACHE_DIR is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from . import knobs

# runtime/native/: chunk_attention.py, decode_attention.py, routed_experts.py, decode_experts.py,
# quant_decode_attention.py, kv_codec.py
KERNEL_ENVS = (
    "STRATA_CHUNK_KERNEL",
    "STRATA_DECODE_KERNEL",
    "STRATA_EXPERT_KERNEL",
    "STRATA_DECODE_EXPERTS_KERNEL",
    "STRATA_QUANT_DECODE_KERNEL",
    "STRATA_KV_CODEC_KERNEL",
)
NATIVE_MARCH_ENV = "STRATA_NATIVE_MARCH"  # the native ops' -march (default native; x86-64-v2/v3/v4 to run a lower ISA)


def kernel_mode(name: str, env: Mapping[str, str] | None = None) -> str:
    """A native op's switch: auto (or unset) = whichever of the op and ATen's calls measures faster here,
    1 = the op, 0 = ATen's calls -> "auto", "native" or "aten"; anything else is an error naming it."""
    return knobs.read(name, env)


def native_march(env: Mapping[str, str] | None = None) -> str:
    """`STRATA_NATIVE_MARCH`: the ISA level the native ops are built for (g++'s -march), default native."""
    return knobs.read(NATIVE_MARCH_ENV, env)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the engine keeps what it measured per machine: $XDG_CACHE_HOME/strata, else ~/.cache/strata."""
    root = knobs.environ(env).get("XDG_CACHE_HOME", "").strip()
    return (Path(root) if root else Path.home() / ".cache") / "strata"


COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # torch's own variable; its default is /tmp/torchinductor_$USER


def compile_cache_dir(root: Path, env: Mapping[str, str] | None = None) -> Path:
    """`root`/aten-LEVEL: inductor's caches apart per ATen vector level (`ATEN_CPU_CAPABILITY`, default: the
    CPU's own). A step recompiled outside its warm-up was keyed by no level (runtime/compile_cache.py,
    `tag_every_compile`, now keys it) and loaded graphs made at another level: other tokens. Apart, no entry of
    one level can reach another, whatever a key holds."""
    level = knobs.environ(env).get("ATEN_CPU_CAPABILITY", "").strip().lower() or "default"
    return root / f"aten-{''.join(c if c.isalnum() else '_' for c in level)}"


def keep_compile_cache() -> None:
    """The compiled step's caches in `cache_dir()/inductor/aten-LEVEL`, kept across reboots unlike torch's /tmp
    default, unless the variable is set; stage ranks inherit it. Called at the command line's edge, never on import."""
    knobs.export_default(COMPILE_CACHE_ENV, str(compile_cache_dir(cache_dir() / "inductor")))
