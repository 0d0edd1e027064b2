"""This machine's measured layout: which of `--layout plain` and `--layout fastest` did the same work sooner here.

`strata-engine tune` builds an engine in each layout on this machine in turn, gives each the same work (`batch`
streams decoding `tokens` tokens together, then one `read`-token prompt read alone) and keeps the layout that
finished it sooner, with every timing, in `machine-profile.json` in the cache folder (kernel_switches.cache_dir).
One entry per machine and model, keyed by the CPU's flags (runtime/native/build.machine_tag), the cores this
process may use, torch, this package's version and the model: another CPU, a torch upgrade or another model
tunes again. `--layout auto` reads the entry (layout.this_machine) and says what it chose and why; without one
it keeps the documented default. The start-up time (the fastest layout compiles) is reported, not scored: a
server pays it once.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .config import EngineConfig
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


def work_prompts(batch: int, read_tokens: int) -> tuple[list[list[int]], list[int]]:
    """`batch` short prompts of their own, and one long prompt: byte tokens of a fixed text, no tokenizer."""
    text = b"def tune(layout):\n    return measure(layout, on=this_machine)\n"
    streams = [list((text * 2)[i : i + 48]) for i in range(batch)]
    other = b"# one long prompt, read cold: it shares no prefix with the streams\n"
    long = list((other * (read_tokens // len(other) + 1))[:read_tokens])
    return streams, long


def measure(config: EngineConfig, batch: int, tokens: int, read_tokens: int) -> dict[str, float]:
    """Build an engine in `config`'s layout, run the work once to warm it, then time it; the engine is shut down."""
    from .engine import Engine
    from .params import SamplingParams

    began = time.perf_counter()
    engine = Engine(replace(config, log_events=False)).start()
    try:
        start_s = time.perf_counter() - began
        streams, long = work_prompts(batch, read_tokens)
        decode = SamplingParams(max_tokens=tokens, ignore_eos=True)
        first = SamplingParams(max_tokens=1, ignore_eos=True)
        engine.generate(streams[:1], SamplingParams(max_tokens=4, ignore_eos=True))  # warm: first-call costs
        t0 = time.perf_counter()
        done = engine.generate(streams, decode)
        decode_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.generate([long], first)
        read_s = time.perf_counter() - t0
    finally:
        engine.shutdown()
    made = sum(len(c.token_ids) for c in done)
    return {
        "start_s": round(start_s, 2),
        "decode_s": round(decode_s, 3),
        "decode_tok_s": round(made / decode_s, 1),
        "read_s": round(read_s, 3),
        "work_s": round(decode_s + read_s, 3),
    }


def tune(
    configs: Mapping[str, EngineConfig],
    batch: int,
    tokens: int,
    read_tokens: int,
    model: str,
    run: Callable[[EngineConfig, int, int, int], dict[str, float]] = measure,
    say: Callable[[str], None] = lambda line: None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Measure each layout of `configs` ({"plain": ..., "fastest": ...}), keep the entry and return it."""
    measured = {}
    for name, config in configs.items():
        say(
            f"tune: {name} layout: building and running the work ({batch} streams x {tokens} tokens, a {read_tokens}-token read)"
        )
        measured[name] = run(config, batch, tokens, read_tokens)
        say(f"tune: {name}: {describe_one(measured[name])}")
    chosen = min(measured, key=lambda name: measured[name]["work_s"])
    entry = {
        "layout": chosen,
        "measured": measured,
        "work": {"batch": batch, "tokens": tokens, "read_tokens": read_tokens},
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    path = write(model, entry, env)
    say(f"tune: {why(entry)}; kept in {path}")
    return entry


def describe_one(m: Mapping[str, float]) -> str:
    return (
        f"work {m['work_s']:.2f} s (decode {m['decode_tok_s']:.0f} tok/s, the read {m['read_s']:.2f} s), "
        f"start {m['start_s']:.0f} s"
    )


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
