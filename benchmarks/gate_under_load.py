#!/usr/bin/env python
"""The gate's verdicts with and without CPU hogs on the machine: does any check flip on an unmodified engine?

Runs one `strata-verify` check (`interleave`, `cache`, `determinism` or `answers`) --runs times per
condition, quiet and with --hogs busy processes (one pure-Python loop each, bounded by the script's own
lifetime and --hog-seconds, nothing on the network), against each --target: a Strata command
(`--target strata='strata-engine serve ...'`, a fresh engine per phase, as the gate starts it) or a running
server (`--target vllm=@http://127.0.0.1:8001`). Runs alternate quiet and loaded. Prints every run's verdict
and each step's status that differed from the first run of its target, as markdown; a target whose verdict is
not the same in every run has flipped, and the script exits 1 (a step's status may change without changing
the verdict: a behaviour declared absent that a run sees anyway passes, and the rows show it).

  .venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 \\
      --target strata='strata-engine serve --split 2 --batch 4 --batch-groups 2 --prefill-chunk 256' \\
      -- --scale 0.05
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERIFY = str(Path(sys.executable).with_name("strata-verify"))


def hog(seconds: float) -> None:
    """One core busy until `seconds` pass (the parent also terminates it)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 1103515245 + 12345) % 2147483648


def run_check(check: str, target: str, extra: list[str]) -> dict:
    """One gate run; its JSON (verdict and steps), or the failure to run it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "verdict.json"
        where = ["--url", target[1:]] if target.startswith("@") else ["--engine", target]
        began = time.monotonic()
        proc = subprocess.run([VERIFY, check, *where, "--json", str(out), *extra], capture_output=True, text=True)
        took = time.monotonic() - began
        if not out.exists():
            return {
                "verdict": f"NO JSON (exit {proc.returncode})",
                "steps": [],
                "seconds": took,
                "stderr": proc.stderr[-400:],
            }
        data = json.loads(out.read_text())["report"]
        data["seconds"] = took
        return data


def statuses(result: dict) -> dict[str, str]:
    return {f"{step['check']}: {step['name']}": step["status"] for step in result.get("steps", [])}


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to the check itself (e.g. -- --scale 0.05 --lacks give-way).",
    )
    p.add_argument("--check", choices=["interleave", "cache", "determinism", "answers"], default="interleave")
    p.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="NAME=COMMAND|NAME=@URL",
        help="an engine command (a fresh engine per phase) or @URL of a running server; repeatable",
    )
    p.add_argument("--runs", type=int, default=10, help="runs per target and condition (default 10)")
    p.add_argument("--hogs", type=int, default=2, help="busy processes while loaded (default 2: one per core here)")
    p.add_argument("--hog-seconds", type=float, default=1800.0, help="the longest a hog lives (default 1800)")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    targets = []
    for spec in args.target:
        name, sep, what = spec.partition("=")
        if not sep or not name or not what:
            p.error(f"--target: {spec!r} is not NAME=COMMAND or NAME=@URL")
        targets.append((name, what))
    print(
        f"strata-verify {args.check} {' '.join(extra)}: {args.runs} runs per target, quiet and with {args.hogs} "
        f"CPU hog(s), alternating; {os.cpu_count()} CPU(s)",
        file=sys.stderr,
    )
    rows, notes, flipped = [], [], False
    for name, what in targets:
        first: dict[str, str] | None = None
        verdicts: set[str] = set()
        step_changes = 0
        for i in range(2 * args.runs):
            loaded = i % 2 == 1
            hogs = [
                multiprocessing.Process(target=hog, args=(args.hog_seconds,), daemon=True)
                for _ in range(args.hogs if loaded else 0)
            ]
            for h in hogs:
                h.start()
            try:
                result = run_check(args.check, what, extra)
            finally:
                for h in hogs:
                    h.terminate()
                    h.join()
            steps = statuses(result)
            first = steps if first is None else first
            changed = {t: s for t, s in steps.items() if first.get(t) != s}
            verdicts.add(result["verdict"])
            step_changes += bool(changed)
            note = "; ".join(f"{t}: {s}" for t, s in changed.items()) or result.get("stderr", "")
            rows.append(
                f"| {name} | {i // 2 + 1} | {'loaded' if loaded else 'quiet'} | {result['verdict']} "
                f"| {result['seconds']:.0f} s | {note} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
        flipped |= len(verdicts) > 1
        notes.append(
            f"{name}: verdict {' / '.join(sorted(verdicts))} in {2 * args.runs} runs; {step_changes} run(s) with a "
            "step status unlike the first run's (a declared-absent behaviour seen anyway passes: not a flip "
            "unless the verdict changes)"
        )
    print("| target | run | condition | verdict | wall | steps that differ from the target's first run |")
    print("|---|---:|---|---|---:|---|")
    print("\n".join(rows))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    print(
        "\nflipped: "
        + (
            "YES: a target's verdict changed (see the rows above)"
            if flipped
            else "no: every run of each target gave the same verdict"
        )
    )
    return 1 if flipped else 0


if __name__ == "__main__":
    sys.exit(main())
