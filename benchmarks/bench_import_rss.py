#!/usr/bin/env python
"""The memory floor of a server: what a fresh interpreter holds resident after each import step.

Each step runs in a new interpreter (a subprocess) that does the imports of every step before it and its own,
then reads its VmRSS and RssAnon (the anonymous, private part: heap and the like, not the mapped files of
libraries) from /proc/self/status. The steps: bare python; `import torch`; torch's compiler (what a compiled
decode step loads); the package with what `strata-engine serve` imports to serve (its command, the HTTP server,
the engine). Prints a markdown table of what each step adds and the total, with the CPU.

With --aot, the compiler's step is replaced by what serving an ahead-of-time compiled graph would hold: a small
graph is compiled into a package first (in its own interpreter, untimed), and the step loads and runs it with
torch's C++ runner (`torch._C._aoti.AOTIModelPackageLoader`), which imports neither dynamo nor inductor.

  .venv/bin/python benchmarks/bench_import_rss.py
  .venv/bin/python benchmarks/bench_import_rss.py --repeats 5
  .venv/bin/python benchmarks/bench_import_rss.py --aot
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
COMPILER = 2  # STEPS' index of torch's compiler, the step --aot replaces
AOT_BUILD = """
import sys, torch, torch._inductor
layer = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.SiLU(), torch.nn.Linear(1024, 256))
program = torch.export.export(layer.eval(), (torch.randn(4, 256),))
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[1])
"""
AOT_STEP = (
    "an ahead-of-time compiled graph, loaded and run by torch's C++ runner (no compiler imported)",
    "import sys, torch\n"
    "torch._C._aoti.AOTIModelPackageLoader({package!r}, 'model', False, 1, -1).run([torch.randn(4, 256)])\n"
    "assert 'torch._inductor' not in sys.modules and 'torch._dynamo' not in sys.modules",
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
        "--aot", action="store_true", help="the compiler's step replaced by loading an AOT-compiled graph (see above)"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="interpreters per step; the table shows the median (default 1)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not Path("/proc/self/status").exists():
        raise SystemExit("needs Linux's /proc/self/status")
    steps = STEPS
    if args.aot:
        package = Path(tempfile.mkdtemp(prefix="bench-import-rss-")) / "graph.pt2"
        subprocess.run([sys.executable, "-c", AOT_BUILD, str(package)], check=True, capture_output=True, timeout=900)
        label, code = AOT_STEP
        steps = tuple((label, code.format(package=str(package))) if i == COMPILER else s for i, s in enumerate(STEPS))
    rows, before, imports = [], {"VmRSS": 0, "RssAnon": 0}, []
    for label, code in steps:
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
