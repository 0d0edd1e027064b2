"""Provenance of a bench: what ran, where, when, from which code, so a table can be traced to its setup.

Collected once per bench directory (meta.json); each run adds what its engine said about itself
(GET /v1/engine) and its exact command line.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from strata_engine.engine_info import version

PACKAGES = (
    "strata",
    "torch",
    "numpy",
    "scipy",
    "httpx",
    "click",
    "tabulate",
    "matplotlib",
    "fastapi",
    "uvicorn",
    "starlette",
    "transformers",
)

ISA_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "STRATA_NATIVE_MARCH")  # what runs below the CPU's level


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(path: Path) -> dict[str, Any] | None:
    rev = _run(["git", "rev-parse", "HEAD"], cwd=path)
    if rev is None:
        return None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path) or ""
    return {
        "path": str(path),
        "revision": rev,
        "dirty": bool(status),
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=path),
    }


def package_versions() -> dict[str, str | None]:
    """Each of PACKAGES' installed version, None where it is not installed; Strata's own from its one home."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = version() if name == "strata" else metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "cpu_count": os.cpu_count(), "cpu": _cpu_name()}
    if _cpuinfo("flags") is not None:  # the vector extensions a speed table depends on
        info["cpu_model"] = _family_model()
        info["cpu_flags"] = vector_flags()
    if shutil.which("nvidia-smi"):
        gpus = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
        info["gpus"] = gpus.splitlines() if gpus else []
    return info


def _cpuinfo(field: str) -> str | None:
    """The first `field` line's value in /proc/cpuinfo, or None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


def cpu_flags(prefix: str = "") -> list[str]:
    """The CPU's feature flags starting with `prefix` (e.g. "avx512"), sorted: machines of one model name differ in
    them, so a speed table names them. Empty where /proc/cpuinfo is missing."""
    return sorted(flag for flag in (_cpuinfo("flags") or "").split() if flag.startswith(prefix))


def vector_flags() -> list[str]:
    """The vector extensions a speed table depends on: avx, avx2, fma, avx512*, amx*."""
    return [f for f in cpu_flags() if f in ("avx", "avx2", "fma") or f.startswith(("avx512", "amx"))]


def _family_model() -> str:
    family, model = _cpuinfo("cpu family"), _cpuinfo("model\t")  # the tab: not "model name"
    return f"family {family} model {model}"


def cpu_line() -> str:
    """This CPU in one line for a table's heading, as /proc/cpuinfo (and lscpu) name it: model name, family and
    model numbers, vector flags, e.g. "AMD EPYC, family 25 model 17, avx avx2 avx512bw ... fma". Machines of
    one model name differ in the rest, so every bench prints this line."""
    if _cpuinfo("flags") is None:
        return _cpu_name()
    flags = vector_flags()
    names = " ".join(flags) or "no avx"
    if not any(f.startswith("avx512") for f in flags):
        names += ", no avx512"
    return f"{_cpu_name()}, {_family_model()}, {names}"


def collect(argv: list[str]) -> dict[str, Any]:
    """Everything about the machine and code that the bench itself can see."""
    package_dir = Path(__file__).resolve().parent.parent
    cwd_git = git_info(Path.cwd())
    pkg_git = git_info(package_dir)
    return {
        "date_utc": utc_now(),
        "argv": argv,
        "cwd": str(Path.cwd()),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "git": {"cwd": cwd_git, "strata": pkg_git if pkg_git != cwd_git else "same as cwd"},
        "packages": package_versions(),
        "device": device_info(),
        "strata_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("STRATA_")},
        "isa_env": {k: os.environ[k] for k in ISA_ENV if os.environ.get(k)},  # a lower vector level, forced
    }
