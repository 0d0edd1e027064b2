"""Native ops: a C++ source built once per machine with torch.utils.cpp_extension, or None where it cannot be.

Contract: `native_op(env, name, source, function, fallback)` returns the built function `function` of
`source`, or None where the environment variable `env` is 0 (`config.kernel_on`: 0 or 1, unset = 1; any
other value is a ValueError naming it) or the build fails here (no C++ compiler, no ninja, a build error:
said once on stderr, naming `fallback`, what serves instead). Each op is built the first time it is asked for
(g++ with `-O3 -march=native`, ~20-40 s once), then loaded from torch's extension cache
(~/.cache/torch_extensions) under a name holding a hash of this CPU's flags, so a home directory shared by
machines of other kinds does not hand one of them another's build.
"""
from __future__ import annotations

import hashlib
import platform
import sys
import threading

from ..config import kernel_on

_lock = threading.Lock()
_built: dict[str, object] = {}


def native_op(env: str, name: str, source: str, function: str, fallback: str):
    """The built op, or None (turned off by `env`, or no build here: the reason once on stderr)."""
    if not kernel_on(env):
        return None
    with _lock:
        if name not in _built:
            _built[name] = _build(name, source, function, fallback, env)
        return _built[name]


def machine_tag() -> str:
    """A short hash of this CPU's flags (the ops are compiled with -march=native)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:10]


def _build(name: str, source: str, function: str, fallback: str, env: str):
    try:
        from torch.utils.cpp_extension import load_inline

        module = load_inline(f"{name}_{machine_tag()}", cpp_sources=[source],
                             extra_cflags=["-O3", "-march=native", "-fopenmp-simd"], verbose=False)
        return getattr(module, function)
    except Exception as exc:  # no compiler, no ninja, a build error: the ATen path serves
        print(f"strata-engine: the native {function.replace('_', ' ')} did not build ({type(exc).__name__}: "
              f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); {fallback} ({env}=0 skips the build)",
              file=sys.stderr)
        return None
