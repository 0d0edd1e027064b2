"""`strata-verify builds`: the checks for builds side by side (builds.py), each named on the command line as
NAME=COMMAND or NAME=URL; two at least, the first the reference."""

from __future__ import annotations

import re

import click

from strata_verify.answers import AnswersOptions
from strata_verify.builds import run_builds
from strata_verify.cli.common import against_option, load_answers, output_options, progress, run_check
from strata_verify.determinism import DeterminismOptions
from strata_verify.engine_proc import Target
from strata_verify.interleave.check import InterleaveOptions
from strata_verify.report import Report, Step
from strata_verify.requests import InterleavePlan

_BUILD = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$", re.DOTALL)


def _build_targets(values: tuple[str, ...], start_timeout: float) -> list[Target]:
    targets = []
    for value in values:
        match = _BUILD.match(value.strip())
        if not match:
            raise click.BadParameter(f"{value!r}: give NAME=COMMAND (or NAME=http://host:port)", param_hint="--engine")
        name, what = match.groups()
        is_url = re.match(r"^https?://", what.strip()) is not None
        targets.append(
            Target(
                name=name,
                url=what.strip() if is_url else None,
                command=None if is_url else what,
                start_timeout=start_timeout,
            )
        )
    if len(targets) < 2:
        raise click.BadParameter(
            "give at least two builds: --engine A=COMMAND --engine B=COMMAND", param_hint="--engine"
        )
    if len({t.name for t in targets}) != len(targets):
        raise click.BadParameter("build names must be unique", param_hint="--engine")
    return targets


@click.command()
@click.option(
    "--engine", "engines", multiple=True, required=True, help="NAME=COMMAND, once per build (first = reference)."
)
@click.option("--scale", type=float, default=1.0, show_default=True, help="Interleave sizes, as in `interleave`.")
@click.option("--tokens", type=int, default=64, show_default=True, help="Tokens per determinism answer.")
@click.option("--interleave-tokens", type=int, default=16, show_default=True, help="Tokens C, D and E generate.")
@click.option("--only", type=click.Choice(["interleave", "determinism", "answers"]), help="Run one check only.")
@against_option("Independent answers every build must match (the answers check).")
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds any one wait may take.")
@output_options
def builds(
    engines,
    scale,
    tokens,
    interleave_tokens,
    only,
    against_path,
    timeout,
    near_tie,
    start_timeout,
    markdown,
    junit_path,
    json_path,
):
    """The checks for two builds side by side, their answers compared with each other and the independent ones."""
    targets = _build_targets(engines, start_timeout)
    try:
        iopts = InterleaveOptions(
            plan=InterleavePlan(scale=scale, answer_tokens=interleave_tokens), near_tie=near_tie, phase_timeout=timeout
        )
        dopts = DeterminismOptions(tokens=tokens, near_tie=near_tie)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    report = Report(meta={"check": "builds", **{f"build {t.name}": t.describe() for t in targets}, "scale": scale})

    def on_step(step: Step) -> None:  # steps are kept as they come, so a later gate error loses none
        report.add(step)
        progress(f"[{step.status}] {step.title}")

    def check():  # the independent answers are read after the progress line, and their error ends the run here
        answers = None
        if only in (None, "answers"):
            reference, expected = load_answers(against_path, "answers", report, markdown, junit_path, json_path)
            answers = (reference, expected, AnswersOptions(near_tie=near_tie, phase_timeout=timeout))
        return run_builds(
            targets,
            iopts if only in (None, "interleave") else None,
            dopts if only in (None, "determinism") else None,
            on_step=on_step,
            answers=answers,
        )

    run_check(
        report, "builds " + ", ".join(t.name for t in targets), check, markdown, junit_path, json_path, add_steps=False
    )
