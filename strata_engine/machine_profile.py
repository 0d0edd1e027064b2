"""This machine's measured layout: which of `--layout plain` and `--layout fastest` did the same work sooner here.

The profile is a file of measured verdicts: `strata-engine tune` (tuning.py times the layouts) keeps the layout
that finished the same work sooner, with every timing, in `machine-profile.json` in the cache folder
(kernel_switches.cache_dir); `read` and `write` are its only reader and writer. One entry per machine and model,
keyed by the CPU's flags (runtime/native/build.machine_tag), the cores this process may use, torch, this
package's version and the model: another CPU, a torch upgrade or another model tunes again. `--layout auto`
reads the entry (layout.this_machine) and says what it chose and why (`why`); without one it keeps the
documented default. Nothing here builds an engine: the engine resolves its layout through this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .kernel_switches import cache_dir

PROFILE_FILE = "machine-profile.json"
CANDIDATES = ("plain", "fastest")


def profile_path(env: Mapping[str, str] | None = None) -> Path:
    return cache_dir(env) / PROFILE_FILE


def machine_key(model: str) -> str:
    """What a measured layout holds for: this CPU (its flags), its cores, torch, this package and the model."""
    import torch

    from .engine_info import version
    from .runtime.native.build import machine_tag

    name = os.path.basename(str(model).rstrip("/")) or str(model)
    return " | ".join([f"cpu {machine_tag()}", f"{os.cpu_count()} cores", f"torch {torch.__version__}",
                       f"strata {version()}", f"model {name}"])  # fmt: skip


def read(model: str, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """This machine's entry for `model`, or None (never tuned, another machine's, or an unreadable file)."""
    try:
        table = json.loads(profile_path(env).read_text())
    except (OSError, ValueError):
        return None
    entry = table.get(machine_key(model)) if isinstance(table, dict) else None
    return entry if isinstance(entry, dict) and entry.get("layout") in CANDIDATES else None


def write(model: str, entry: dict[str, Any], env: Mapping[str, str] | None = None) -> Path:
    """Keep `entry` for this machine and `model` (other machines' and models' entries stay)."""
    path = profile_path(env)
    try:
        table = json.loads(path.read_text())
        table = table if isinstance(table, dict) else {}
    except (OSError, ValueError):
        table = {}
    table[machine_key(model)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def why(entry: Mapping[str, Any]) -> str:
    """One line: what the profile chose and what it measured."""
    measured = entry.get("measured") or {}
    chosen = entry["layout"]
    others = ", ".join(f"{name}'s {m['work_s']:.2f} s" for name, m in measured.items() if name != chosen)
    took = measured.get(chosen, {}).get("work_s")
    return (
        f"this machine's profile ({entry.get('date_utc', 'undated')}): {chosen} did the work in "
        f"{took:.2f} s against {others or 'no other layout'}"
        if took is not None
        else f"this machine's profile ({entry.get('date_utc', 'undated')}): {chosen}"
    )
