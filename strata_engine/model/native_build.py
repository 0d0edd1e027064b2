"""Native ops: a C++ source built once per machine with torch.utils.cpp_extension, or None where it cannot be.

Contract: `native_op(env, name, source, function, fallback, march=None)` returns the built function
`function` of `source`, or None where the switch `env` is 0 (kernel_switches), where the runtime chose ATen's
path (`serve(name, "aten")`, runtime/native_ops.py), or where the build fails here (said once on stderr,
naming `fallback`). g++ builds it with `-O3 -march=<march>` (`STRATA_NATIVE_MARCH`, default native), the
compiler's warnings said on stderr and `-Wpsabi` an error, into torch's extension cache under a name that
holds the level, a hash of this CPU's flags and a hash of the source. `PREAMBLE` is the C++ every op
shares: the includes, `v16` (16 float lanes held in registers of the target's width) and the softmax's
exponential, one definition for a scalar and for 16 lanes.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..kernel_switches import cache_dir, kernel_mode, native_march

PREAMBLE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// v16: 16 float lanes held as 16/LANES vectors of the widest width the target has in registers (16 with
// AVX-512, 8 with AVX, 4 otherwise), so the compiler keeps them in registers at every ISA level (a 64-byte
// GCC vector without AVX-512 has no register form and lives on the stack). Every operation is per lane, so
// a lane's result does not depend on the width: the same bits at every level with the same FMA contraction.
#if defined(__AVX512F__)
constexpr int LANES = 16;
#elif defined(__AVX__)
constexpr int LANES = 8;
#else
constexpr int LANES = 4;
#endif
constexpr int PARTS = 16 / LANES;
// v16 accumulators a register tile may hold and leave room for its operands: half the vector registers
// (32 with AVX-512, 16 below it) at this width.
constexpr int ACC16 = LANES == 16 ? 16 : LANES == 8 ? 4 : 2;
typedef float vpart __attribute__((vector_size(4 * LANES)));
typedef int32_t ipart __attribute__((vector_size(4 * LANES)));
struct v16 { vpart p[PARTS]; };
struct i16 { ipart p[PARTS]; };

#define STRATA_LANEWISE(R, NAME, A, B, EXPR) \
  static inline R NAME(A a, B b) { R r; for (int i = 0; i < PARTS; ++i) r.p[i] = EXPR; return r; }
STRATA_LANEWISE(v16, operator+, v16, v16, a.p[i] + b.p[i])
STRATA_LANEWISE(v16, operator-, v16, v16, a.p[i] - b.p[i])
STRATA_LANEWISE(v16, operator*, v16, v16, a.p[i] * b.p[i])
STRATA_LANEWISE(v16, operator+, v16, float, a.p[i] + b)
STRATA_LANEWISE(v16, operator-, v16, float, a.p[i] - b)
STRATA_LANEWISE(v16, operator*, v16, float, a.p[i] * b)
STRATA_LANEWISE(v16, operator*, float, v16, a * b.p[i])
STRATA_LANEWISE(i16, operator<, v16, v16, a.p[i] < b.p[i])
STRATA_LANEWISE(i16, operator>, v16, v16, a.p[i] > b.p[i])
STRATA_LANEWISE(i16, operator+, i16, int32_t, a.p[i] + b)
STRATA_LANEWISE(i16, operator<<, i16, int, a.p[i] << b)
STRATA_LANEWISE(i16, operator>=, i16, int32_t, a.p[i] >= b)
STRATA_LANEWISE(i16, operator<, i16, int32_t, a.p[i] < b)
STRATA_LANEWISE(i16, operator&, i16, i16, a.p[i] & b.p[i])
#undef STRATA_LANEWISE
static inline v16& operator+=(v16& a, v16 b) { a = a + b; return a; }
static inline v16 select(i16 m, v16 a, v16 b) {  // per lane: m ? a : b
  v16 r;
  for (int i = 0; i < PARTS; ++i) r.p[i] = m.p[i] ? a.p[i] : b.p[i];
  return r;
}
static inline float select(bool m, float a, float b) { return m ? a : b; }
static inline v16 load16(const float* p) {
  v16 v;
  for (int i = 0; i < PARTS; ++i) std::memcpy(&v.p[i], p + LANES * i, sizeof(vpart));
  return v;
}
static inline void store16(float* p, v16 v) {
  for (int i = 0; i < PARTS; ++i) std::memcpy(p + LANES * i, &v.p[i], sizeof(vpart));
}
static inline v16 splat(float x) { return v16{} + x; }
static inline i16 lane_index() {  // 0, 1, ..., 15
  i16 v;
  for (int i = 0; i < PARTS; ++i)
    for (int l = 0; l < LANES; ++l) v.p[i][l] = LANES * i + l;
  return v;
}

static inline int32_t round_to_int(float r) { return static_cast<int32_t>(r); }
static inline i16 round_to_int(v16 r) {
  i16 v;
  for (int i = 0; i < PARTS; ++i) v.p[i] = __builtin_convertvector(r.p[i], ipart);
  return v;
}
static inline float bits_to_float(int32_t b) { float f; std::memcpy(&f, &b, sizeof f); return f; }
static inline v16 bits_to_float(i16 b) {
  v16 v;
  for (int i = 0; i < PARTS; ++i) v.p[i] = reinterpret_cast<vpart>(b.p[i]);
  return v;
}

// e^x for x <= 0 (a softmax's max-subtracted scores), for a float or 16 lanes, in a form the compiler
// vectorizes: x = r ln2 + f with r rounded to nearest (ln2 in two parts, as Cephes does) and |f| <= ln2/2,
// e^f by its Taylor series to f^7 (error < 6e-9), times 2^r built in the exponent bits; below -87.3 it
// returns 2^-126 (a weight of ~1e-38).
template <typename F>
static inline F exp_nonpositive(F x) {
  const F floor_ = F{} - 87.3f;
  x = select(x < floor_, floor_, x);
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
  return e * bits_to_float((round_to_int(r) + 127) << 23);
}
"""

_lock = threading.Lock()
_built: dict[tuple[str, str], object] = {}


_serving: dict[str, str] = {}  # op name -> "aten" where the runtime chose ATen's path (runtime/native_ops.py)


def serve(name: str, path: str | None) -> None:
    """Which path serves op `name` in this process from now on: "aten" (its accessor returns None), "native"
    or None (as built: the op where it builds and its switch allows it)."""
    if path is None:
        _serving.pop(name, None)
    else:
        _serving[name] = path


def serving(name: str) -> str | None:
    """The path set for op `name` in this process (None: as built)."""
    return _serving.get(name)


def verdicts_path() -> Path:
    """Where the runtime keeps each op's verdict for this machine (runtime/native_ops.py writes it)."""
    return cache_dir() / "kernel-verdicts.json"


def verdict_key(name: str, source: str, march: str) -> str:
    """A verdict holds for this CPU's flags, this torch, the op's source and its -march."""
    import torch

    return " | ".join([name, machine_tag(), f"torch {torch.__version__}", source_tag(source), march])


def read_verdicts() -> dict:
    """This machine's kept verdicts ({} where there are none or the file is unreadable)."""
    try:
        table = json.loads(verdicts_path().read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


_looked: dict[str, float] = {}


def _machine_verdict(name: str, source: str, march: str) -> str | None:
    """The path this machine's kept verdict names for the op, so a process that never raced (a test, a
    benchmark) serves what the engines here serve; read at most every 5 s while there is none."""
    now = time.monotonic()
    if now - _looked.get(name, -1e9) < 5.0:
        return None
    _looked[name] = now
    found = read_verdicts().get(verdict_key(name, source, march))
    if found:
        _serving[name] = found["path"]
        return found["path"]
    return None


def native_op(env: str, name: str, source: str, function: str, fallback: str, march: str | None = None):
    """The built op, or None (turned off by `env`, by `serve(name, "aten")` or by this machine's kept verdict,
    or no build here: the reason once on stderr). `march` is g++'s -march (default `STRATA_NATIVE_MARCH`, else
    native): tests and benchmarks build each ISA level, which no verdict turns off."""
    mode = kernel_mode(env)  # asked on every prompt chunk: one read of the switch
    if mode == "aten":
        return None
    if march is None:
        march = native_march()
        # a verdict (the runtime's race, or this machine's kept one) chooses only where the switch says auto
        if mode == "auto" and (_serving.get(name) or _machine_verdict(name, source, march)) == "aten":
            return None
    with _lock:
        if (name, march) not in _built:
            _built[name, march] = _build(name, source, function, fallback, env, march)
        return _built[name, march]


def machine_tag() -> str:
    """A short hash of this CPU's flags (the ops are compiled with -march=native)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:10]


def source_tag(source: str) -> str:
    """A short hash of an op's whole C++ (the preamble with it)."""
    return hashlib.sha256((PREAMBLE + source).encode()).hexdigest()[:8]


def _build(name: str, source: str, function: str, fallback: str, env: str, march: str):
    level = "" if march == "native" else f"_{march.replace('-', '_').replace('.', '_')}"
    module_name = f"{name}{level}_{machine_tag()}_{source_tag(source)}"
    began = time.monotonic()
    try:
        from torch.utils.cpp_extension import _get_build_directory, _import_module_from_library

        build_dir = _get_build_directory(module_name, verbose=False)
        fresh = not os.path.exists(os.path.join(build_dir, f"{module_name}.so"))
        if not fresh:  # built before: import it, without torch's build lock (one a killed process left would hang us)
            try:
                return getattr(_import_module_from_library(module_name, build_dir, True), function)
            except (ImportError, AttributeError, OSError):
                fresh = True  # a partial build: build it again
        _clear_stale_lock(build_dir)
        if fresh:
            print(f"strata-engine: building the native {function.replace('_', ' ')} for -march={march} (once per "
                  f"machine and source, ~30-70 s)...", file=sys.stderr, flush=True)
        module = _load_showing_warnings(module_name, PREAMBLE + source, march)
        if fresh:
            print(f"strata-engine: built the native {function.replace('_', ' ')} in {time.monotonic() - began:.0f} s",
                  file=sys.stderr, flush=True)
        return getattr(module, function)
    except Exception as exc:  # no compiler, no ninja, a build error: the ATen path serves
        print(f"strata-engine: the native {function.replace('_', ' ')} did not build for -march={march} "
              f"({type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); "
              f"{fallback} ({env}=0 skips the build)", file=sys.stderr)
        return None


def _clear_stale_lock(build_dir: str, older_than_s: float = 600.0) -> None:
    """torch's build lock left by a process killed mid-build makes every later build of the op wait forever."""
    lock = os.path.join(build_dir, "lock")
    try:
        if time.time() - os.path.getmtime(lock) > older_than_s:
            os.remove(lock)
            print(f"strata-engine: removed a stale build lock ({lock})", file=sys.stderr)
    except OSError:
        pass


def _load_showing_warnings(module_name: str, code: str, march: str):
    """load_inline, with the compiler's warnings said on stderr: torch's build prints them to fd 1 only when
    verbose, so fd 1 goes to a file for the build (nothing else writes there before the server is ready)."""
    from torch.utils.cpp_extension import load_inline

    flags = ["-O3", f"-march={march}", "-fopenmp-simd", "-Wall", "-Werror=psabi"]
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as log:
        os.dup2(log.fileno(), 1)
        try:
            return load_inline(module_name, cpp_sources=[code], extra_cflags=flags, verbose=True)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            log.seek(0)
            lines = log.read().decode(errors="replace").splitlines()
            warned = [line for line in lines if "warning:" in line or "error:" in line]
            for line in warned[:20]:
                print(f"strata-engine: building {module_name}: {line.strip()}", file=sys.stderr)
