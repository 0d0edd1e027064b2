"""`strata-verify interleave`: A and B decode, C's long read joins, D gives way to E, each request equal to
its solo run (interleave/, the spec's own check)."""

from __future__ import annotations

import click

from strata_verify.behaviours import BEHAVIOURS, parse_lacks
from strata_verify.cli.common import output_options, run_check, target
from strata_verify.interleave.check import InterleaveOptions, run_interleave
from strata_verify.interleave.concurrency import SERIAL_WINDOW_S
from strata_verify.report import Report
from strata_verify.requests import InterleavePlan, default_engine_command, default_piece


@click.command()
@click.option(
    "--engine",
    help="Engine command line (a fresh engine per phase); `--host/--port` are appended unless it has {port}.",
)
@click.option(
    "--url", help="URL of a running server (any family: Strata, llama.cpp, vLLM, ...); solo runs then share it."
)
@click.option(
    "--scale", type=float, default=1.0, show_default=True, help="Multiply the spec's sizes (40K long prompt)."
)
@click.option("--tokens", type=int, default=16, show_default=True, help="Tokens C, D and E generate.")
@click.option(
    "--vocab",
    type=int,
    help="Vocabulary size, for a server that says neither it (GET /v1/engine) nor "
    "a tokenizer shown to agree with ours (vLLM's /tokenize).",
)
@click.option(
    "--lacks",
    "lacks",
    metavar="BEHAVIOURS",
    default="",
    help="Comma-separated spec behaviours the "
    "engine under test is declared NOT to have: "
    + "; ".join(f"{k}: {v}" for k, v in BEHAVIOURS.items())
    + ". Their steps are then 'not applicable' instead of failing as not exercised; equality checks "
    "always count. Default: none (the spec's engine; e.g. vLLM: --lacks give-way).",
)
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds any one wait may take.")
@click.option(
    "--serial-window",
    type=float,
    default=SERIAL_WINDOW_S,
    show_default=True,
    help="Seconds the engine's "
    "own counters (GET /metrics) must say 'one running, one waiting' while A or B streams before the gate "
    "concludes the server runs one request at a time.",
)
@output_options
def interleave(
    engine,
    url,
    scale,
    tokens,
    vocab,
    lacks,
    timeout,
    serial_window,
    near_tie,
    start_timeout,
    markdown,
    junit_path,
    json_path,
):
    """A and B decode, C's long read joins, D gives way to E; every request must equal its solo run."""
    try:
        declared = parse_lacks(lacks)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lacks") from None
    try:
        plan = InterleavePlan(scale=scale, answer_tokens=tokens)
        options = InterleaveOptions(
            plan=plan,
            near_tie=near_tie,
            phase_timeout=timeout,
            vocab_size=vocab,
            lacks=declared,
            serial_window=serial_window,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    where = target(engine, url, default_engine_command(scale), start_timeout)
    report = Report(
        meta={
            "check": "interleave",
            "engine": where.describe(),
            "scale": scale,
            "prompts": " ".join(f"{k}={v}" for k, v in plan.prompt_lengths().items()),
        }
    )
    if not engine and not url:
        report.meta["default piece"] = default_piece(scale)
    if declared:
        report.meta["declared absent"] = ", ".join(sorted(declared))
    if url:
        report.meta["solo runs"] = (
            "on the same server after the interleaved run (--url: not a fresh engine); "
            "each request skips the prefix cache where the server has that switch"
        )

    def then(run) -> None:
        report.meta["server"] = run.info.get("family", "?")
        if run.cache:
            report.meta["prefix cache"] = run.cache

    run_check(
        report,
        f"interleave on {where.describe()}",
        lambda: run_interleave(where, options),
        markdown,
        junit_path,
        json_path,
        then,
    )
