"""Timing the layouts on this machine: what `strata-engine tune` runs, and the verdict it keeps.

Contract: `tune(configs, batch, tokens, read_tokens, model)` builds an engine in each layout of `configs` in turn,
gives each the same work (`batch` streams decoding `tokens` tokens together, then one `read_tokens`-token prompt
read alone, after a warm-up), and writes the layout that finished it sooner, with every timing, to the machine
profile (machine_profile.write), returning the entry. The start-up time (the fastest layout compiles) is
reported, not scored: a server pays it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .config import EngineConfig
from .machine_profile import why, write


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
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure each layout of `configs` ({"plain": ..., "fastest": ...}), keep the entry and return it. `say` gets
    the progress lines, `report` (default: `say`) each layout's figures and the verdict."""
    report = report or say
    measured = {}
    for name, config in configs.items():
        say(
            f"tune: {name} layout: building and running the work ({batch} streams x {tokens} tokens, a {read_tokens}-token read)"
        )
        measured[name] = run(config, batch, tokens, read_tokens)
        report(f"tune: {name}: {describe_one(measured[name])}")
    chosen = min(measured, key=lambda name: measured[name]["work_s"])
    entry = {
        "layout": chosen,
        "measured": measured,
        "work": {"batch": batch, "tokens": tokens, "read_tokens": read_tokens},
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    path = write(model, entry, env)
    report(f"tune: {why(entry)}; kept in {path}")
    return entry


def describe_one(m: Mapping[str, float]) -> str:
    return (
        f"work {m['work_s']:.2f} s (decode {m['decode_tok_s']:.0f} tok/s, the read {m['read_s']:.2f} s), "
        f"start {m['start_s']:.0f} s"
    )
