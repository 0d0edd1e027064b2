#!/usr/bin/env python
"""How long `strata-engine serve` takes to its ready line, cold and warm.

Cold: every cache the engine fills on a first start is a fresh empty folder (XDG_CACHE_HOME for the kernel
verdicts and inductor's compile cache, TORCH_EXTENSIONS_DIR for the native ops' builds), as on a machine that
never ran it; with --installed, after scripts/install.sh's build of the native ops into them (untimed), as
on a machine that was just installed. Warm: the same folders again, --warm times. Each start's wall time to health is measured
here, its own stderr's "ready in" line gives the compiling part, and `/v1/engine`'s `rss_bytes` the memory
it holds before its first request (and, with --read N, after reading an N-token prompt). Prints a markdown
table with the CPU.

  .venv/bin/python benchmarks/bench_start.py --warm 2
  .venv/bin/python benchmarks/bench_start.py --warm 0 --installed
  .venv/bin/python benchmarks/bench_start.py --warm 2 -- --layout plain --batch 4
  .venv/bin/python benchmarks/bench_start.py --warm 1 --read 45000 -- --layout plain --batch 4
  .venv/bin/python benchmarks/bench_start.py --warm 0 --read 45000 --decode 16 -- --batch 1 --ctx 131072
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strata_bench.engines.launcher import EngineProcess  # noqa: E402
from strata_bench.provenance import cpu_line  # noqa: E402

CACHES = ("XDG_CACHE_HOME", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR")


def resident(url: str, kv: bool = False) -> str:
    """`/v1/engine`'s resident bytes; with kv, and what the OS holds of the KV cache (`kv.committed_bytes`)."""
    info = httpx.get(f"{url}/v1/engine", timeout=30).json()
    rss, committed = info.get("rss_bytes"), info.get("kv", {}).get("committed_bytes")
    shown = f"{rss / 1e6:.0f} MB" if rss else "-"
    return f"{shown} (KV {committed / 2**20:.2f} MiB)" if kv and committed is not None else shown


def start_once(command: str, timeout: float, read: int = 0, decode: int = 1) -> tuple[float, str, str]:
    """Seconds to health, the engine's "ready in" line (or its last stderr line) and its resident memory
    (then, with `read`, after one prompt of that many tokens and `decode` tokens of its answer)."""
    began = time.monotonic()
    with EngineProcess(command, name="strata", start_timeout=timeout) as engine:
        took = time.monotonic() - began
        held = resident(engine.url)
        if read:
            prompt = [(7 + 31 * i) % 250 for i in range(read)]
            httpx.post(
                f"{engine.url}/v1/completions",
                timeout=timeout,
                json={"prompt": prompt, "max_tokens": decode, "ignore_eos": True, "temperature": 0},
            ).raise_for_status()
            held += f" / {resident(engine.url, kv=True)}"
        deadline = time.monotonic() + 10
        lines: list[str] = []
        while time.monotonic() < deadline:  # the line follows the health by a moment
            lines = engine.stderr_tail(60)
            if any("ready in" in line for line in lines):
                break
            time.sleep(0.2)
    ready = next((line for line in reversed(lines) if "ready in" in line), lines[-1] if lines else "")
    return took, ready.replace("strata-engine: ", ""), held


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after -- go to `strata-engine serve`."
    )
    p.add_argument("--warm", type=int, default=2, help="warm starts after the cold one (default 2)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a start may take (default 900)")
    p.add_argument(
        "--read",
        type=int,
        default=0,
        metavar="N",
        help="after health, read one N-token prompt and give the resident memory after it too",
    )
    p.add_argument(
        "--decode",
        type=int,
        default=1,
        metavar="N",
        help="with --read: the answer's tokens (default 1); past 1 the slot's KV is measured between decode steps",
    )
    p.add_argument(
        "--installed",
        action="store_true",
        help="build the native ops first, as scripts/install.sh does (untimed): the cold start of a fresh install",
    )
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    command = " ".join(["strata-engine", "serve", *extra])
    saved = {name: os.environ.get(name) for name in CACHES}
    folder = Path(tempfile.mkdtemp(prefix="strata-start-"))
    rows = []
    try:
        os.environ["XDG_CACHE_HOME"] = str(folder / "cache")
        os.environ["TORCH_EXTENSIONS_DIR"] = str(folder / "torch_extensions")
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # serve puts it under XDG_CACHE_HOME/strata/inductor
        if args.installed:
            subprocess.run([sys.executable, "-m", "strata_engine.runtime.native"], check=True)
        for i in range(1 + args.warm):
            kind = ("cold, installed" if args.installed else "cold") if i == 0 else f"warm {i}"
            took, ready, resident = start_once(command, args.timeout, args.read, args.decode)
            compiling = re.search(r"compiling the decode step: ([\d.]+) s", ready)
            rows.append(
                f"| {kind} | {took:.1f} s | {compiling.group(1) + ' s' if compiling else '-'} | {resident} | {ready} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)
    print(f"`{command}`: CPU {cpu_line()}, {os.cpu_count()} cores")
    print()
    print(
        f"| start | to health | compiling | resident{f' / after {args.read:,} tokens and {args.decode} decoded (KV committed)' if args.read else ''} | the engine's ready line |"
    )
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
