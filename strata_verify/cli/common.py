"""What every `strata-verify` subcommand shares: the output options, the target (an engine command or a URL),
`run_check`, which runs a check into the report, `load_or_fail`, which reads a manifest or answers file or
ends the run with one FAIL step naming what is wrong with it (`--against` and `load_answers` for the
independent answers), and `finish`, which prints the report as text
or markdown, writes JUnit and JSON, and exits with its status.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from strata_verify import independent, junit
from strata_verify.client import GateError
from strata_verify.diverge import NEAR_TIE
from strata_verify.engine_proc import Target
from strata_verify.manifest import ManifestError
from strata_verify.report import FAIL, Report, Step


def output_options(fn):
    fn = click.option(
        "--json", "json_path", type=click.Path(dir_okay=False), help="Write raw results and the verdict as JSON."
    )(fn)
    fn = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML for CI.")(fn)
    fn = click.option("--markdown", is_flag=True, help="Print markdown (for a PR comment) instead of text.")(fn)
    fn = click.option(
        "--start-timeout",
        type=float,
        default=300.0,
        show_default=True,
        help="Seconds an engine may take to become ready.",
    )(fn)
    fn = click.option(
        "--near-tie",
        type=float,
        default=NEAR_TIE,
        show_default=True,
        help="Top-2 logprob margin under which a difference is named a near-tie.",
    )(fn)
    return fn


def against_option(help: str):
    """`--against PATH`: the independent answers file (scripts/make_independent_answers.py), the embedded one
    by default."""
    return click.option(
        "--against",
        "against_path",
        type=click.Path(dir_okay=False),
        default=str(independent.GOLDEN),
        show_default=True,
        help=help,
    )


def load_answers(
    against_path: str, check: str, report: Report, markdown: bool, junit_path: str | None, json_path: str | None
) -> tuple[dict, list]:
    """The independent answers (reference, expected) at `against_path`, or the run ends with `check`'s FAIL step
    naming what is wrong with the file."""
    reference, expected = load_or_fail(
        independent.load,
        against_path,
        check,
        f"against {Path(against_path).name}",
        report,
        markdown,
        junit_path,
        json_path,
    )
    return reference, expected


def target(engine: str | None, url: str | None, default: str, start_timeout: float) -> Target:
    if engine and url:
        raise click.UsageError("give --engine or --url, not both")
    if url:
        return Target(url=url, start_timeout=start_timeout)
    return Target(command=engine or default, start_timeout=start_timeout)


def finish(report: Report, markdown: bool, junit_path: str | None, json_path: str | None, raw: dict) -> NoReturn:
    click.echo(report.render_markdown() if markdown else report.render_text())
    if junit_path:
        junit.write(report, junit_path)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps({"report": report.to_dict(), "raw": raw}, indent=1, default=str) + "\n")
    sys.exit(report.exit_code)


def load_or_fail(
    load: Callable[[str], Any],
    path: str,
    check: str,
    title: str,
    report: Report,
    markdown: bool,
    junit_path: str | None,
    json_path: str | None,
) -> Any:
    """`load(path)`; a file it cannot compare against (ManifestError) is the report's one FAIL step, `check`:
    `title`, and the run finishes there."""
    try:
        return load(path)
    except ManifestError as exc:
        report.add(Step(check, title, FAIL, str(exc)))
        finish(report, markdown, junit_path, json_path, {})


def run_check(
    report: Report,
    message: str,
    check: Callable[[], Any],
    markdown: bool,
    junit_path: str | None,
    json_path: str | None,
    then: Callable[[Any], None] | None = None,
    add_steps: bool = True,
) -> NoReturn:
    """Say `message`, run `check()` and time it: its run's steps go into the report (add_steps=False: the check
    added them as they came), `then(run)` adds what the run says about itself, a GateError becomes the report's
    gate error; then `finish` with the run's raw results ({} when the gate could not run)."""
    raw: dict = {}
    started = time.monotonic()
    progress(message)
    try:
        run = check()
        if add_steps:
            report.add(*run.steps)
        raw = run.to_dict()
        if then is not None:
            then(run)
    except GateError as exc:
        gate_failed(report, exc)
    report.meta["seconds"] = round(time.monotonic() - started, 1)
    finish(report, markdown, junit_path, json_path, raw)


def gate_failed(report: Report, exc: GateError) -> None:
    report.gate_error = str(exc)
    report.stderr_tail = list(exc.stderr_tail)


def progress(message: str) -> None:
    click.echo(f"strata-verify: {message}", err=True)
