#!/usr/bin/env python
"""The gate's verdicts with and without CPU hogs on the machine: does any check flip on an unmodified engine?

Runs one `strata-verify` check (`interleave`, `cache`, `determinism`, `answers`, `needle` or `kv-quality`)
--runs times per condition, quiet and with --hogs busy processes (one pure-Python loop each, bounded by the
script's own lifetime and --hog-seconds, nothing on the network), against each --target: a Strata command
(`--target strata='strata-engine serve ...'`, a fresh engine per phase, as the gate starts it) or a running
server (`--target vllm=@http://127.0.0.1:8001`). Without --target it runs the check as CI's plain
`strata-verify CHECK` does: on the check's own default engine (its report names the command), or in process
for `kv-quality`, which takes no engine. Runs alternate quiet and loaded. Prints every run's verdict
and each step's status that differed from the first run of its target, as markdown, then per target:

- a **verdict flip**: the target's verdict was not the same in every run (some PASS, some not);
- a **failure in every run**: the same verdict each time, but not PASS (no flip, and no pass either);
- **step statuses that moved**: runs in which a step's status differed from the first run's while the
  verdict stayed the same (a behaviour declared absent that a run sees anyway passes: not a flip).

The exit status follows the verdicts: 0 when every run of every target gave PASS, 1 otherwise (a flip or a
failure; a failing run's failed steps are listed with their reasons).

`--out FILE.json` keeps every run's report (written after each run, so a series cut short keeps what ran),
the command, the CPU and the load average at each run's start; `--render FILE.json` prints the same markdown
from a kept file, `--summary FILE.json...` one row per target and condition over kept files
(docs/measurements/gate-under-load.md renders its tables from benchmarks/results/ so).

  .venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 \\
      --target strata='strata-engine serve --split 2 --batch 4 --batch-groups 2 --prefill-chunk 256' \\
      -- --scale 0.05
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERIFY = str(Path(sys.executable).with_name("strata-verify"))
CHECKS = ["interleave", "cache", "determinism", "answers", "needle", "kv-quality"]
DEFAULT = "strata"  # the target's name without --target: no --engine or --url, the check's own default
HEADER = (
    "| target | run | condition | load at start | verdict | wall | steps that differ from the target's first run |\n"
    "|---|---:|---|---:|---|---:|---|"
)


def hog(seconds: float) -> None:
    """One core busy until `seconds` pass (the parent also terminates it)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 1103515245 + 12345) % 2147483648


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def cpu_line() -> str:
    """lscpu's facts that matter here: the CPU, its family and model, the cores, the vector flags."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() not in info:
                info[key.strip()] = value.strip()
    except OSError:
        return f"{os.cpu_count()} CPU(s)"
    flags = [f for f in info.get("flags", "").split() if f in ("avx", "avx2", "fma") or f.startswith("avx512")]
    return (
        f"{info.get('model name', '?')}, family {info.get('cpu family', '?')} model {info.get('model', '?')}, "
        f"{os.cpu_count()} CPU(s), flags {' '.join(flags) or 'no avx'}"
    )


def run_check(check: str, target: str, extra: list[str]) -> dict:
    """One gate run; its JSON report (verdict and steps), or the failure to run it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "verdict.json"
        where = [] if not target else ["--url", target[1:]] if target.startswith("@") else ["--engine", target]
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


def failed_steps(result: dict) -> list[str]:
    """A run's steps that did not hold, with their reasons: which step, which request."""
    return [
        f"{step['check']}: {step['name']}: {step['status']}: {step.get('reason', '')}"
        + "".join(f" | {line}" for line in step.get("evidence") or [])
        for step in result.get("steps", [])
        if step["status"] in ("fail", "not exercised")
    ]


def summarize(name: str, runs: list[dict]) -> dict:
    """What a target's runs mean: verdicts per condition, a flip, a failure in every run, steps that moved."""
    first = statuses(runs[0]["report"]) if runs else {}
    by_condition: dict[str, dict[str, int]] = {}
    moved, failing = [], []
    for run in runs:
        verdict = run["report"]["verdict"]
        counts = by_condition.setdefault(run["condition"], {})
        counts[verdict] = counts.get(verdict, 0) + 1
        if any(first.get(t) != s for t, s in statuses(run["report"]).items()):
            moved.append(run)
        if verdict != "PASS":
            failing.append(run)
    verdicts = {run["report"]["verdict"] for run in runs}
    return {
        "name": name,
        "runs": len(runs),
        "by_condition": by_condition,
        "flipped": len(verdicts) > 1,
        "failed_every_run": bool(runs) and "PASS" not in verdicts,
        "moved": moved,
        "failing": failing,
    }


def summary_lines(summary: dict) -> list[str]:
    conditions = "; ".join(
        f"{cond}: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
        for cond, counts in summary["by_condition"].items()
    )
    if summary["flipped"]:
        flip = f"**verdict flipped**: {len(summary['failing'])} of {summary['runs']} run(s) not PASS"
    elif summary["failed_every_run"]:
        flip = "no verdict flip, but **no run passed**"
    else:
        flip = "no verdict flip"
    moved = (
        f"{len(summary['moved'])} run(s) with a step status unlike the first run's, the verdict unchanged"
        if not summary["flipped"]
        else f"{len(summary['moved'])} run(s) with a step status unlike the first run's"
    )
    lines = [f"{summary['name']}: {summary['runs']} runs ({conditions}); {flip}; {moved}"]
    for run in summary["failing"]:
        why = "; ".join(failed_steps(run["report"])) or run["report"].get("stderr", "") or "no step failed"
        lines.append(f"  {summary['name']} run {run['run']} ({run['condition']}) {run['report']['verdict']}: {why}")
    return lines


def verdict_line(summaries: list[dict]) -> tuple[str, int]:
    """The last line and the exit status: both follow the verdicts, never a step status that moved."""
    flipped = [s["name"] for s in summaries if s["flipped"]]
    failed = [s["name"] for s in summaries if s["failed_every_run"]]
    if not flipped and not failed:
        return "verdicts: every run of every target gave PASS; no verdict flipped", 0
    parts = []
    if flipped:
        parts.append(f"verdict flipped on {', '.join(flipped)}")
    if failed:
        parts.append(f"no run passed on {', '.join(failed)}")
    return "verdicts: " + "; ".join(parts) + " (the failing runs' steps are listed above)", 1


def row(name: str, run: dict, first: dict[str, str]) -> str:
    result = run["report"]
    changed = {t: s for t, s in statuses(result).items() if first.get(t) != s}
    note = "; ".join(f"{t}: {s}" for t, s in changed.items()) or result.get("stderr", "").replace("\n", " ")
    load = run.get("load")
    return (
        f"| {name} | {run['run']} | {run['condition']} | {'' if load is None else f'{load:.2f}'} "
        f"| {result['verdict']} | {result['seconds']:.0f} s | {note} |"
    )


def render(record: dict) -> tuple[str, int]:
    """The markdown of a kept record (the table, each target's summary, the verdict line) and its exit status."""
    rows, notes, summaries = [], [], []
    for target in record["targets"]:
        runs = target["runs"]
        first = statuses(runs[0]["report"]) if runs else {}
        rows += [row(target["name"], run, first) for run in runs]
        summary = summarize(target["name"], runs)
        summaries.append(summary)
        notes += summary_lines(summary)
    line, code = verdict_line(summaries)
    head = (
        f"{record['check']}, {record['runs_per_condition']} run(s) per condition asked, quiet and with "
        f"{record['hogs']} CPU hog(s), alternating; {record['cpu']}; {record['started']} to "
        f"{record.get('ended') or '(cut short)'}"
    )
    notes_md = "\n".join(f"- {n.strip()}" if not n.startswith("  ") else f"  - {n.strip()}" for n in notes)
    return f"{head}\n\n{HEADER}\n" + "\n".join(rows) + f"\n\n{notes_md}\n\n{line}\n", code


def engine_text(what: str) -> str:
    """A target as the overview shows it: a command's program by its name (no home directory), a URL as is."""
    if what.startswith("@"):
        return what
    program, _, rest = what.partition(" ")
    return " ".join([Path(program).name if "/" in program else program, rest]).strip()


def target_engine(target: dict) -> str:
    """The engine a target ran, as markdown: its command or URL, or (no --target) the command the check's report
    names, or in process."""
    if target["what"]:
        return f"`{engine_text(target['what'])}`"
    named = [r["report"].get("meta", {}).get("engine") for r in target["runs"]]
    named = [e for e in named if e]
    return f"`{engine_text(named[0])}` (the check's default)" if named else "in process (the check takes no engine)"


def overview(records: list[dict]) -> str:
    """One row per series, target and condition: when, the runs, their verdicts, their wall times."""
    lines = [
        "| series from | check | target | engine | condition | runs | verdicts | wall median (range) |",
        "|---|---|---|---|---|---:|---|---|",
    ]
    for record in records:
        check = " ".join([record["check"], *record["extra"]])
        for target in record["targets"]:
            summary = summarize(target["name"], target["runs"])
            for cond, counts in summary["by_condition"].items():
                walls = sorted(r["report"]["seconds"] for r in target["runs"] if r["condition"] == cond)
                half = len(walls) // 2
                median = walls[half] if len(walls) % 2 else (walls[half - 1] + walls[half]) / 2
                verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
                lines.append(
                    f"| {record['started']} | `{check}` | {target['name']} | {target_engine(target)} | {cond} "
                    f"| {sum(counts.values())} | {verdicts} | {median:.0f} s ({walls[0]:.0f}-{walls[-1]:.0f} s) |"
                )
    return "\n".join(lines) + "\n"


def markdown(argv: list[str]) -> tuple[str, int]:
    """What `--render FILE` or `--summary FILE...` prints (scripts/measurements.py renders pages with it)."""
    if argv[:1] == ["--render"] and len(argv) == 2:
        return render(json.loads(Path(argv[1]).read_text()))
    if argv[:1] == ["--summary"] and len(argv) >= 2:
        records = [json.loads(Path(a).read_text()) for a in argv[1:]]
        codes = [render(r)[1] for r in records]
        return overview(records), max(codes)
    raise ValueError(f"{' '.join(argv)!r}: --render FILE.json, or --summary FILE.json...")


def save(record: dict, path: Path | None) -> None:
    if path is None:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to the check itself (e.g. -- --scale 0.05 --lacks give-way).",
    )
    p.add_argument("--check", choices=CHECKS, default="interleave")
    p.add_argument(
        "--target",
        action="append",
        metavar="NAME=COMMAND|NAME=@URL",
        help="an engine command (a fresh engine per phase) or @URL of a running server; repeatable. Without it: "
        "the check's own default engine, as CI's plain `strata-verify CHECK` (kv-quality: in process, no target)",
    )
    p.add_argument("--runs", type=int, default=10, help="runs per target and condition (default 10)")
    p.add_argument("--hogs", type=int, default=2, help="busy processes while loaded (default 2: one per core here)")
    p.add_argument("--hog-seconds", type=float, default=1800.0, help="the longest a hog lives (default 1800)")
    p.add_argument("--out", type=Path, help="keep every run's report, the command and the CPU as JSON here")
    p.add_argument("--render", type=Path, metavar="FILE.json", help="print the markdown of a kept --out file")
    p.add_argument("--summary", type=Path, nargs="+", metavar="FILE.json", help="one row per kept series and condition")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.render or args.summary:
        argv = ["--render", str(args.render)] if args.render else ["--summary", *map(str, args.summary)]
        text, code = markdown(argv)
        print(text, end="")
        return code
    if args.check == "kv-quality" and args.target:
        p.error("kv-quality reads the embedded model in process: it takes no --target")
    targets = [] if args.target else [(DEFAULT, "")]
    for spec in args.target or []:
        name, sep, what = spec.partition("=")
        if not sep or not name or not what:
            p.error(f"--target: {spec!r} is not NAME=COMMAND or NAME=@URL")
        targets.append((name, what))
    record = {
        "check": args.check,
        "extra": extra,
        "command": shlex.join([".venv/bin/python", "benchmarks/gate_under_load.py", *sys.argv[1:]]),
        "runs_per_condition": args.runs,
        "hogs": args.hogs,
        "cpu": cpu_line(),
        "started": now(),
        "ended": None,
        "targets": [{"name": name, "what": what, "runs": []} for name, what in targets],
    }
    print(
        f"strata-verify {args.check} {' '.join(extra)}: {args.runs} runs per target, quiet and with {args.hogs} "
        f"CPU hog(s), alternating; {record['cpu']}",
        file=sys.stderr,
    )
    for target in record["targets"]:
        for i in range(2 * args.runs):
            loaded = i % 2 == 1
            hogs = [
                multiprocessing.Process(target=hog, args=(args.hog_seconds,), daemon=True)
                for _ in range(args.hogs if loaded else 0)
            ]
            load = os.getloadavg()[0]
            started = now()
            for h in hogs:
                h.start()
            try:
                result = run_check(args.check, target["what"], extra)
            finally:
                for h in hogs:
                    h.terminate()
                    h.join()
            run = {
                "run": i // 2 + 1,
                "condition": "loaded" if loaded else "quiet",
                "started": started,
                "load": load,
                "report": result,
            }
            target["runs"].append(run)
            save(record, args.out)
            first = statuses(target["runs"][0]["report"])
            print(row(target["name"], run, first), file=sys.stderr, flush=True)
    record["ended"] = now()
    save(record, args.out)
    text, code = render(record)
    print(text, end="")
    return code


if __name__ == "__main__":
    sys.exit(main())
