"""Builds the native ops a start is about to need, side by side: one process an op that this machine lacks.

Each op is one C++ file that g++ compiles on one core in ~30-70 s; built one after another in the engine's
own process, a first start waits for their sum. `build_missing(ops)` starts a child process per op that is
not built yet (its switch not 0, no kept verdict giving its place to ATen), at most `jobs` at once (default:
this machine's cores), and waits for them; each child's progress lines reach stderr. The engine then loads
the built libraries as usual (build.py); an op whose child failed is built again there and says why.
`python -m strata_engine.runtime.native` builds every op (scripts/install.sh runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable

from ...kernel_switches import kernel_mode, native_march
from . import build

Op = tuple[str, str, Callable, str]  # (switch, op name, accessor, C++ source): choice.OPS's first four


def missing(ops: Iterable[Op]) -> list[Op]:
    """The ops a start would build: switched on or auto, not given to ATen by a kept verdict, not built."""
    march = native_march()
    verdicts = build.read_verdicts()
    out = []
    for env, name, accessor, source in ops:
        mode = kernel_mode(env)
        if mode == "aten":
            continue
        kept = verdicts.get(build.verdict_key(name, source, march)) or {}
        if mode == "auto" and kept.get("path") == "aten":
            continue
        if not build.is_built(name, source, march):
            out.append((env, name, accessor, source))
    return out


def build_missing(ops: Iterable[Op], jobs: int | None = None) -> list[str]:
    """Build `ops`' missing libraries in child processes, `jobs` at a time; the names of those it built. One
    missing op alone is built in this process (a child would cost the same and a second interpreter)."""
    todo = missing(ops)
    if len(todo) == 1:
        todo[0][2]()
    if len(todo) < 2:
        return [name for _, name, _, _ in todo]
    jobs = max(1, jobs or os.cpu_count() or 1)
    running: list[subprocess.Popen] = []
    for _, _, accessor, _ in todo:
        if len(running) >= jobs:
            running.pop(0).wait()
        code = f"from {accessor.__module__} import {accessor.__name__} as op; op()"
        running.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL))
    for child in running:
        child.wait()
    return [name for _, name, _, _ in todo]
