"""`strata-verify determinism`: fixed greedy prompts answered twice, their hashes saved as a manifest or
compared with another build's (determinism.py, manifest.py)."""

from __future__ import annotations

from pathlib import Path

import click

from strata_verify import manifest
from strata_verify.cli.common import load_or_fail, output_options, run_check, target
from strata_verify.determinism import DeterminismOptions, run_determinism
from strata_verify.report import INFO, Report, Step

DETERMINISM_ENGINE = "strata-engine serve"  # the golden manifest's engine


@click.command()
@click.option("--engine", help="Engine command line (each run on a fresh engine).")
@click.option("--url", help="URL of a running server instead (both runs share it: not fresh).")
@click.option("--tokens", type=int, help="Tokens per answer [default: 64, or the --against manifest's].")
@click.option(
    "--save", "save_path", type=click.Path(dir_okay=False), help="Write the hashes and environment as a manifest."
)
@click.option(
    "--against", "against_path", type=click.Path(dir_okay=False), help="Compare with another build's manifest."
)
@output_options
def determinism(engine, url, tokens, save_path, against_path, near_tie, start_timeout, markdown, junit_path, json_path):
    """Six fixed greedy prompts, each answered twice on a fresh engine; SHA-256 of each answer's token ids."""
    where = target(engine, url, DETERMINISM_ENGINE, start_timeout)
    report = Report(meta={"check": "determinism", "engine": where.describe()})
    against = None
    if against_path:
        against = load_or_fail(
            manifest.load,
            against_path,
            "determinism",
            f"against {against_path}",
            report,
            markdown,
            junit_path,
            json_path,
        )
    try:
        options = DeterminismOptions(tokens=tokens or (against["max_tokens"] if against else 64), near_tie=near_tie)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    report.meta["tokens"] = options.tokens

    def then(run) -> None:
        if against is not None:
            report.add(*manifest.compare(against, run, label=Path(against_path).name))
        if save_path:
            report.add(_save(run, save_path))

    run_check(
        report,
        f"determinism on {where.describe()}",
        lambda: run_determinism(where, options),
        markdown,
        junit_path,
        json_path,
        then,
    )


def _save(run, path: str) -> Step:
    if any(step.failed for step in run.steps):
        return Step(
            "determinism",
            "manifest",
            INFO,
            f"not saved to {path}: the runs differ, so there is no single answer to record",
        )
    manifest.save(manifest.build(run), path)
    return Step("determinism", "manifest", INFO, f"saved to {path}")
