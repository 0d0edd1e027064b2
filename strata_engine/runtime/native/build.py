"""The one loader of the native ops: a C++ source built once per machine with torch.utils.cpp_extension, or
None where it cannot be.

Contract: `native_op(env, name, source, function, fallback, march=None)` returns the built function
`function` of `source`, or None where the switch `env` is 0 (kernel_switches), where the runtime chose ATen's
path (`serve(name, "aten")`, choice.py), or where the build fails here (said once on stderr,
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

from ...kernel_switches import cache_dir, kernel_mode, native_march

NATIVE_DIR = Path(__file__).resolve().parents[2] / "native"  # the ops' C++: preamble.h and one .cpp an op


def native_source(file: str) -> str:
    """The text of a C++ file of strata_engine/native/."""
    return (NATIVE_DIR / file).read_text()


PREAMBLE = native_source("preamble.h")  # the includes, v16 and exp_nonpositive every op shares

_lock = threading.Lock()
_built: dict[tuple[str, str], object] = {}


_serving: dict[str, str] = {}  # op name -> "aten" where the runtime chose ATen's path (choice.py)


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
    """Where the runtime keeps each op's verdict for this machine (choice.py writes it)."""
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


def source_tag(source: str, preamble: str = PREAMBLE) -> str:
    """A short hash of an op's whole C++ (the preamble with it)."""
    return hashlib.sha256((preamble + source).encode()).hexdigest()[:8]


def module_name(name: str, source: str, march: str, preamble: str = PREAMBLE) -> str:
    """The op's name in torch's extension cache: its level, this CPU's flags and its source, hashed."""
    level = "" if march == "native" else f"_{march.replace('-', '_').replace('.', '_')}"
    return f"{name}{level}_{machine_tag()}_{source_tag(source, preamble)}"


def is_built(name: str, source: str, march: str) -> bool:
    """Whether the op's library for this level, CPU and source is already in torch's extension cache."""
    from torch.utils.cpp_extension import _get_build_directory

    module = module_name(name, source, march)
    return os.path.exists(os.path.join(_get_build_directory(module, verbose=False), f"{module}.so"))


def build_from(name: str, preamble: str, source: str, function: str, march: str):
    """The op built from C++ given whole (another revision's preamble and source: a benchmark's baseline), at
    -march=`march`; no switch or verdict applies. None where it does not build (the reason on stderr)."""
    with _lock:
        return _build(name, source, function, "no baseline", "no switch", march, preamble)


def _build(name: str, source: str, function: str, fallback: str, env: str, march: str, preamble: str = PREAMBLE):
    library = module_name(name, source, march, preamble)
    began = time.monotonic()
    try:
        from torch.utils.cpp_extension import _get_build_directory, _import_module_from_library

        build_dir = _get_build_directory(library, verbose=False)
        fresh = not os.path.exists(os.path.join(build_dir, f"{library}.so"))
        if not fresh:  # built before: import it, without torch's build lock (one a killed process left would hang us)
            try:
                return getattr(_import_module_from_library(library, build_dir, True), function)
            except (ImportError, AttributeError, OSError):
                fresh = True  # a partial build: build it again
        _clear_stale_lock(build_dir)
        if fresh:
            print(
                f"strata-engine: building the native {function.replace('_', ' ')} for -march={march} (once per "
                f"machine and source, ~30-70 s)...",
                file=sys.stderr,
                flush=True,
            )
        module = _load_showing_warnings(library, preamble + source, march)
        if fresh:
            print(
                f"strata-engine: built the native {function.replace('_', ' ')} in {time.monotonic() - began:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        return getattr(module, function)
    except Exception as exc:  # no compiler, no ninja, a build error: the ATen path serves
        print(
            f"strata-engine: the native {function.replace('_', ' ')} did not build for -march={march} "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); "
            f"{fallback} ({env}=0 skips the build)",
            file=sys.stderr,
        )
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
