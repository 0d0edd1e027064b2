"""`strata-verify answers`: long prompts, solo and together, against answers made outside this build
(answers.py, independent.py)."""

from __future__ import annotations

import click

from strata_verify import independent
from strata_verify.answers import LOGPROB_TOL, AnswersOptions, run_answers
from strata_verify.cli.common import against_option, load_answers, output_options, run_check, target
from strata_verify.report import Report
from strata_verify.requests import default_engine_command


@click.command()
@click.option(
    "--engine", help="Engine command line (a fresh engine per phase) [default: the interleave check's at --scale 0.05]."
)
@click.option("--url", help="URL of a running server instead (both phases share it: not fresh).")
@against_option("Independent answers file (scripts/make_independent_answers.py).")
@click.option(
    "--logprob-tol",
    type=float,
    default=LOGPROB_TOL,
    show_default=True,
    help="Largest |engine - independent| chosen-token logprob (nats) where the tokens agree.",
)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds any one wait may take.")
@output_options
def answers(engine, url, against_path, logprob_tol, timeout, near_tie, start_timeout, markdown, junit_path, json_path):
    """Long prompts answered solo and together must equal answers made outside this build (transformers, fp64)."""
    try:
        options = AnswersOptions(near_tie=near_tie, logprob_tol=logprob_tol, phase_timeout=timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    report = Report(meta={"check": "answers", "against": against_path})
    reference, expected = load_answers(against_path, "answers", report, markdown, junit_path, json_path)
    needed = max(len(e.prompt) for e in expected) + int(reference["max_tokens"]) + 1  # the longest answer's context
    where = target(engine, url, default_engine_command(0.05, needed), start_timeout)
    report.meta["engine"] = where.describe()
    report.meta["expected"] = independent.made_by(reference)
    run_check(
        report,
        f"answers on {where.describe()}",
        lambda: run_answers(where, reference, expected, options),
        markdown,
        junit_path,
        json_path,
    )
