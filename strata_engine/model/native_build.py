"""Native ops: a C++ source built once per machine with torch.utils.cpp_extension, or None where it cannot be.

Contract: `native_op(env, name, source, function, fallback)` returns the built function `function` of
`source`, or None where the environment variable `env` is 0 (`config.kernel_on`: 0 or 1, unset = 1; any
other value is a ValueError naming it) or the build fails here (no C++ compiler, no ninja, a build error:
said once on stderr, naming `fallback`, what serves instead). Each op is built the first time it is asked for
(g++ with `-O3 -march=native`, ~20-40 s once), then loaded from torch's extension cache
(~/.cache/torch_extensions) under a name holding a hash of this CPU's flags, so a home directory shared by
machines of other kinds does not hand one of them another's build, and a hash of the source, so two builds
of the engine on one machine (an A/B of a change to an op) each load their own instead of rebuilding over
each other's. `PREAMBLE` is C++ every op shares, put in front of each source: the includes, the 16-float
vector type and the softmax's exponential, one definition for a scalar and for 16 lanes.
"""
from __future__ import annotations

import hashlib
import platform
import sys
import threading

from ..config import kernel_on

PREAMBLE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));

static inline int32_t round_to_int(float r) { return static_cast<int32_t>(r); }
static inline i16 round_to_int(v16 r) { return __builtin_convertvector(r, i16); }

// e^x for x <= 0 (a softmax's max-subtracted scores), for a float or 16 lanes, in a form the compiler
// vectorizes: x = r ln2 + f with r rounded to nearest (ln2 in two parts, as Cephes does) and |f| <= ln2/2,
// e^f by its Taylor series to f^7 (error < 6e-9), times 2^r built in the exponent bits; below -87.3 it
// returns 2^-126 (a weight of ~1e-38).
template <typename F>
static inline F exp_nonpositive(F x) {
  const F floor_ = F{} - 87.3f;
  x = x < floor_ ? floor_ : x;
  const F r = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const F f = (x - r * 0.693359375f) + r * 2.12194440e-4f;
  F e = F{} + 1.0f / 5040.0f;
  e = e * f + 1.0f / 720.0f;
  e = e * f + 1.0f / 120.0f;
  e = e * f + 1.0f / 24.0f;
  e = e * f + 1.0f / 6.0f;
  e = e * f + 0.5f;
  e = e * f + 1.0f;
  e = e * f + 1.0f;
  const auto bits = (round_to_int(r) + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}
"""

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

        code = PREAMBLE + source
        module = load_inline(f"{name}_{machine_tag()}_{hashlib.sha256(code.encode()).hexdigest()[:8]}", cpp_sources=[code],
                             extra_cflags=["-O3", "-march=native", "-fopenmp-simd"], verbose=False)
        return getattr(module, function)
    except Exception as exc:  # no compiler, no ninja, a build error: the ATen path serves
        print(f"strata-engine: the native {function.replace('_', ' ')} did not build ({type(exc).__name__}: "
              f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); {fallback} ({env}=0 skips the build)",
              file=sys.stderr)
        return None
