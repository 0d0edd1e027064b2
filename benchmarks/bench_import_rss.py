#!/usr/bin/env python
"""The memory floor of a server: what a fresh interpreter holds resident after each import step.

Each step runs in a new interpreter (a subprocess) that does the imports of every step before it and its own,
then reads its VmRSS and RssAnon (the anonymous, private part: heap and the like, not the mapped files of
libraries) from /proc/self/status. The steps: bare python; `import torch`; torch's compiler (what a compiled
decode step loads); the package with what `strata-engine serve` imports to serve (its command, the HTTP server,
the engine). Prints a markdown table of what each step adds and the total, with the CPU.

  .venv/bin/python benchmarks/bench_import_rss.py
  .venv/bin/python benchmarks/bench_import_rss.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strata_bench.provenance import cpu_line  # noqa: E402

# (label, the step's own imports); a step's interpreter runs every step's imports up to and including its own
STEPS = (
    ("bare python", ""),
    ("`import torch`", "import torch"),
    (
        "torch's compiler (`torch._dynamo`, `torch._inductor.compile_fx`)",
        "import torch._dynamo, torch._inductor.compile_fx",
    ),
    (
        "`strata_engine` and what `serve` imports (cli.serve, server.run, engine)",
        "import strata_engine, strata_engine.cli.serve, strata_engine.server.run, strata_engine.engine",
    ),
)
READ = """
import json
fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "RssAnon")}))
"""


def measure(code: str) -> dict[str, int]:
    """VmRSS and RssAnon in bytes of a fresh interpreter once `code` ran; this checkout's packages first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    out = subprocess.run(
        [sys.executable, "-c", code + "\n" + READ], env=env, capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def mb(value: float) -> str:
    return f"{value / 1e6:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Each step is a fresh interpreter; sizes are MB (10^6 bytes).",
        epilog="Steps: " + "; ".join(label for label, _ in STEPS) + ". Linux only (/proc/self/status).",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="interpreters per step; the table shows the median (default 1)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not Path("/proc/self/status").exists():
        raise SystemExit("needs Linux's /proc/self/status")
    rows, before, imports = [], {"VmRSS": 0, "RssAnon": 0}, []
    for label, code in STEPS:
        imports += [code] if code else []
        samples = [measure("\n".join(imports)) for _ in range(args.repeats)]
        now = {k: statistics.median(s[k] for s in samples) for k in ("VmRSS", "RssAnon")}
        rows.append(f"| {label} | +{mb(now['VmRSS'] - before['VmRSS'])} | +{mb(now['RssAnon'] - before['RssAnon'])} |")
        before = now
    print(
        f"CPU {cpu_line()}, {os.cpu_count()} cores; Python {sys.version.split()[0]}, "
        f"torch {metadata.version('torch')}; median of {args.repeats} interpreter(s) a step"
    )
    print()
    print("| step | VmRSS | RssAnon |")
    print("|---|---:|---:|")
    print("\n".join(rows))
    print(f"| **total** | **{mb(before['VmRSS'])}** | **{mb(before['RssAnon'])}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
