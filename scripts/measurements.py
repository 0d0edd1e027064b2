#!/usr/bin/env python
"""Kept bench runs and the tables docs/measurements/ renders from them: a number always has its run.

`keep RUN_DIR NAME` copies a `strata-bench run` directory's JSON (no logs, runs gzipped) to
benchmarks/results/NAME. A page holds a rendered table between two comments:

    <!-- strata-bench report benchmarks/results/NAME --brief --baseline vllm -->
    (the command's output)
    <!-- end of report -->

A gate-under-load series (`benchmarks/gate_under_load.py --out benchmarks/results/NAME.json`) renders the same
way, from its kept JSON:

    <!-- gate_under_load --render benchmarks/results/NAME.json -->
    (the script's markdown for that file; `--summary A.json B.json ...` a row per series and condition)
    <!-- end of report -->

A benchmark script's own output is kept by running it under `record` (its command, this CPU, when, how long,
and its standard output go to benchmarks/results/NAME.json) and renders the same way:

    <!-- recorded benchmarks/results/NAME.json -->
    (the command, the CPU and the output as the script printed it)
    <!-- end of report -->

`render` rewrites every such block from its command; `check` exits 1 naming each block whose text is not its
command's output (the fast tests run it), so a number edited by hand, or a kept run that changed, is caught.

    .venv/bin/python scripts/measurements.py keep runs/engines-avx2 engines-avx2-quiet
    .venv/bin/python scripts/measurements.py record import-rss -- .venv/bin/python benchmarks/bench_import_rss.py
    .venv/bin/python scripts/measurements.py render
    .venv/bin/python scripts/measurements.py check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from strata_bench.cli import main as bench
from strata_bench.provenance import ISA_ENV, cpu_line, utc_now
from strata_bench.results import ResultsDir, ResultsError, keep

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "measurements"
RESULTS = ROOT / "benchmarks" / "results"
BLOCK = re.compile(
    r"(<!-- (?P<tool>strata-bench report|gate_under_load|recorded) (?P<args>[^\n]*?) -->\n)(?P<body>.*?)"
    r"(<!-- end of report -->)",
    re.S,
)


def rendered(args: str) -> str:
    """The output of `strata-bench report ARGS`, run from the repository root."""
    argv = shlex.split(args)
    if not argv or argv[0].startswith("-"):
        raise ValueError(f"'strata-bench report {args}': the directory comes first")
    argv[0] = str(ROOT / argv[0])
    result = CliRunner().invoke(bench, ["report", *argv])
    if result.exit_code != 0:
        raise ValueError(f"'strata-bench report {args}' failed: {result.output.strip() or result.exception}")
    return result.output


def gate_rendered(args: str) -> str:
    """The markdown `benchmarks/gate_under_load.py ARGS` prints for kept series (--render FILE, --summary FILE...)."""
    argv = shlex.split(args)
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            if not (ROOT / arg).is_file():
                raise ValueError(f"'gate_under_load {args}': no such file {arg}")
            argv[i] = str(ROOT / arg)
    spec = importlib.util.spec_from_file_location("gate_under_load", ROOT / "benchmarks" / "gate_under_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.markdown(argv)[0]


def record(name: str, command: list[str]) -> tuple[int, Path | None]:
    """Run `command` from the repository root, its output shown as it comes; on exit status 0 keep the command,
    this CPU, when, how long and the standard output in benchmarks/results/NAME.json. Returns (status, path)."""
    started, t0 = utc_now(), time.monotonic()
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
        lines = []
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
    if proc.returncode != 0:
        return proc.returncode, None
    path = RESULTS / f"{name}.json"
    kept = {
        "command": shlex.join(command),
        "cpu": cpu_line(),
        "cores": len(os.sched_getaffinity(0)),
        "isa_env": {k: os.environ[k] for k in ISA_ENV if os.environ.get(k)},  # set outside the command
        "started": started,
        "seconds": round(time.monotonic() - t0, 1),
        "stdout": "".join(lines),
    }
    path.write_text(json.dumps(kept, indent=1) + "\n")
    return 0, path


SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def table_row(line: str) -> bool:
    """A markdown table's row: "| a | b |". A line such as "|x| (ms): ..." is text."""
    return line.startswith("|") and line.rstrip().endswith("|")


def recorded(args: str) -> str:
    """A recorded run as a page shows it: the command, the CPU, when; then the output, its markdown tables as
    they are and every other run of lines in a text fence."""
    argv = shlex.split(args)  # FILE [--lines REGEX]: only the output's lines REGEX finds
    path = ROOT / argv[0] if argv else ROOT
    if not path.is_file():
        raise ValueError(f"'recorded {args}': no such file")
    kept = json.loads(path.read_text())
    out = kept["stdout"].rstrip("\n")
    if argv[1:2] == ["--lines"] and len(argv) == 3:
        out = "\n".join(line for line in out.splitlines() if re.search(argv[2], line))
    elif len(argv) > 1:
        raise ValueError(f"'recorded {args}': FILE, then optionally --lines REGEX")
    when = kept["started"].replace("T", " ")[:16] + " UTC"
    env = "".join(f"{k}={v} " for k, v in kept.get("isa_env", {}).items())
    cpu = "" if kept["cpu"] in out else f"CPU: {kept['cpu']}, "  # most scripts print the line themselves
    parts = [f"`{env}{kept['command']}`", f"{cpu}{kept['cores']} cores; {when}, {kept['seconds']:.0f} s"]

    groups: list[list[str]] = []  # runs of table rows, and runs of other lines
    for line in out.splitlines():
        if groups and table_row(groups[-1][0]) == table_row(line):
            groups[-1].append(line)
        else:
            groups.append([line])
    runs: list[tuple[bool, list[str]]] = []  # a table has its separator row
    for lines in groups:
        table = table_row(lines[0]) and any(SEPARATOR.match(line) for line in lines)
        if runs and not table and not runs[-1][0]:
            runs[-1][1].extend(lines)
        else:
            runs.append((table, lines))
    for table, lines in runs:
        text = "\n".join(lines).strip("\n")
        if text:
            parts.append(text if table else f"```text\n{text}\n```")
    return "\n\n".join(parts) + "\n"


def block_output(match: re.Match) -> str:
    tool = match.group("tool")
    if tool == "gate_under_load":
        return gate_rendered(match.group("args"))
    if tool == "recorded":
        return recorded(match.group("args"))
    return rendered(match.group("args"))


def typed_rows(page: Path) -> int:
    """Table rows of `page` outside its rendered blocks: numbers typed by hand."""
    text = BLOCK.sub("", page.read_text())
    return sum(table_row(line) for line in text.splitlines())


def blocks(page: Path) -> list[re.Match]:
    return list(BLOCK.finditer(page.read_text()))


def render_page(page: Path) -> bool:
    """Rewrite the page's blocks; True when it changed."""
    text = page.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + block_output(m) + m.group(5), text)
    if new != text:
        page.write_text(new)
    return new != text


def stale(page: Path) -> list[str]:
    """One line per block of `page` that is not its command's output."""
    return [
        f"{page.resolve().relative_to(ROOT) if page.resolve().is_relative_to(ROOT) else page}: the table under '{m.group('tool')} {m.group('args')}' is not that command's "
        f"output; run `python scripts/measurements.py render`"
        for m in blocks(page)
        if m.group("body") != block_output(m)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    kept = sub.add_parser("keep", help="copy a bench directory's JSON to benchmarks/results/NAME")
    kept.add_argument("run_dir", type=Path)
    kept.add_argument("name")
    rec = sub.add_parser("record", help="run a benchmark command and keep its output in benchmarks/results/NAME.json")
    rec.add_argument("name")
    rec.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, run from the repository root")
    sub.add_parser("typed", help="each page's table rows typed by hand (outside rendered blocks)")
    for name in ("render", "check"):
        one = sub.add_parser(name, help=f"{name} the report blocks of the pages (default: every page)")
        one.add_argument("pages", nargs="*", type=Path)
    args = parser.parse_args(argv)
    if args.command in ("keep", "record") and not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", args.name):
        parser.error(f"NAME {args.name!r}: lowercase letters, digits, '.' and '-'")
    if args.command == "record":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("record NAME -- COMMAND: the command to run is missing")
        status, path = record(args.name, cmd)
        if path is None:
            print(f"'{shlex.join(cmd)}' exited {status}: nothing kept", file=sys.stderr)
            return status
        print(f"kept {path.relative_to(ROOT)}; a page shows it under <!-- recorded {path.relative_to(ROOT)} -->")
        return 0
    if args.command == "typed":
        for page in sorted(PAGES.glob("*.md")):
            if typed_rows(page):
                print(f"{typed_rows(page):5d}  {page.relative_to(ROOT)}")
        return 0
    if args.command == "keep":
        try:
            dest = keep(ResultsDir(args.run_dir), RESULTS / args.name)
        except ResultsError as exc:
            parser.error(str(exc))
        print(f"kept {len(dest.runs())} runs in {dest.path.relative_to(ROOT)}")
        return 0
    pages = args.pages or sorted(PAGES.glob("*.md"))
    if args.command == "render":
        for page in pages:
            if render_page(page):
                print(f"rendered {page}")
        return 0
    problems = [line for page in pages for line in stale(page)]
    print("\n".join(problems) or f"every report block of {len(pages)} page(s) is its command's output")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
