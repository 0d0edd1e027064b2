"""`strata-verify needle`: a short prompt among long ones, in batches around the engine's row tile, must
answer as it does alone (needle.py)."""

from __future__ import annotations

import random

import click

from strata_verify.cli.common import output_options, run_check, target
from strata_verify.cli.determinism import DETERMINISM_ENGINE
from strata_verify.needle import NeedleOptions, run_needle
from strata_verify.report import Report


@click.command()
@click.option("--engine", help=f"Engine command line (one fresh engine) [default: {DETERMINISM_ENGINE}].")
@click.option("--url", help="URL of a running server instead.")
@click.option(
    "--seed",
    type=int,
    help="Draws the needle's place in each batch and every prompt [default: a new one, "
    "shown in the report, so a failure reruns with it].",
)
@click.option(
    "--sizes",
    help="Comma-separated batch sizes, each >= 2 [default: one under, at and one over the engine's "
    "row tile, slots per batch group and batch, and 2..5, up to its batch].",
)
@click.option(
    "--filler-tokens",
    type=int,
    default=NeedleOptions.filler_tokens,
    show_default=True,
    help="Tokens in each filler's prompt.",
)
@click.option(
    "--tokens", type=int, default=NeedleOptions.tokens, show_default=True, help="Tokens each request generates."
)
@output_options
def needle(engine, url, seed, sizes, filler_tokens, tokens, near_tie, start_timeout, markdown, junit_path, json_path):
    """A short prompt among long ones, at a random place, in batches around the row tile and decode buckets,
    must answer as it does alone (bitwise logprobs where the engine claims batch invariance)."""
    seed = random.randrange(1 << 31) if seed is None else seed
    try:
        chosen = tuple(int(n) for n in sizes.split(",")) if sizes else ()
        options = NeedleOptions(seed=seed, sizes=chosen, filler_tokens=filler_tokens, tokens=tokens, near_tie=near_tie)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc) if "must" in str(exc) else f"--sizes: {sizes!r} is not comma-separated integers"
        ) from None
    where = target(engine, url, DETERMINISM_ENGINE, start_timeout)
    report = Report(meta={"check": "needle", "engine": where.describe(), "seed": seed})

    def then(run) -> None:
        report.meta["sizes"] = ",".join(str(n) for n, _, _ in run.batches)

    run_check(
        report,
        f"needle on {where.describe()}",
        lambda: run_needle(where, options),
        markdown,
        junit_path,
        json_path,
        then,
    )
