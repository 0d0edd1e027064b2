"""`strata-verify`: the CI gate's command line (interleave, determinism, answers, needle, builds, cache).

Each subcommand is a small function: parse options, then hand the Report and the check to `_run_check`,
which runs it and, through `cli_common.finish`, prints text (or `--markdown`), writes `--junit`/`--json`, and exits 0
(every check holds), 1 (a check failed or was not exercised) or 2 (the gate could not run; the engine's stderr
is shown).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import click

from strata_verify import independent, manifest
from strata_verify.behaviours import BEHAVIOURS, parse_lacks
from strata_verify.answers import LOGPROB_TOL, AnswersOptions, run_answers
from strata_verify.builds import run_builds
from strata_verify.cache.cli import cache
from strata_verify.cli_common import output_options as _output_options, progress as _progress
from strata_verify.cli_common import load_or_fail as _load_or_fail, run_check as _run_check, target as _target
from strata_verify.determinism import DeterminismOptions, run_determinism
from strata_verify.engine_proc import Target
from strata_verify.interleave.check import InterleaveOptions, run_interleave
from strata_verify.interleave.concurrency import SERIAL_WINDOW_S
from strata_verify.needle import NeedleOptions, run_needle
from strata_verify.report import INFO, Report, Step
from strata_verify.requests import InterleavePlan, default_engine_command, default_piece

DETERMINISM_ENGINE = "strata-engine serve"  # the golden manifest's engine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Text-equality gate for engine scheduler changes (see docs/VERIFY.md)."""


@main.command()
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
@_output_options
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
    target = _target(engine, url, default_engine_command(scale), start_timeout)
    report = Report(
        meta={
            "check": "interleave",
            "engine": target.describe(),
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

    _run_check(
        report,
        f"interleave on {target.describe()}",
        lambda: run_interleave(target, options),
        markdown,
        junit_path,
        json_path,
        then,
    )


@main.command()
@click.option("--engine", help="Engine command line (each run on a fresh engine).")
@click.option("--url", help="URL of a running server instead (both runs share it: not fresh).")
@click.option("--tokens", type=int, help="Tokens per answer [default: 64, or the --against manifest's].")
@click.option(
    "--save", "save_path", type=click.Path(dir_okay=False), help="Write the hashes and environment as a manifest."
)
@click.option(
    "--against", "against_path", type=click.Path(dir_okay=False), help="Compare with another build's manifest."
)
@_output_options
def determinism(engine, url, tokens, save_path, against_path, near_tie, start_timeout, markdown, junit_path, json_path):
    """Six fixed greedy prompts, each answered twice on a fresh engine; SHA-256 of each answer's token ids."""
    target = _target(engine, url, DETERMINISM_ENGINE, start_timeout)
    report = Report(meta={"check": "determinism", "engine": target.describe()})
    against = None
    if against_path:
        against = _load_or_fail(
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

    _run_check(
        report,
        f"determinism on {target.describe()}",
        lambda: run_determinism(target, options),
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


@main.command()
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
@_output_options
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
    target = _target(engine, url, DETERMINISM_ENGINE, start_timeout)
    report = Report(meta={"check": "needle", "engine": target.describe(), "seed": seed})

    def then(run) -> None:
        report.meta["sizes"] = ",".join(str(n) for n, _, _ in run.batches)

    _run_check(
        report,
        f"needle on {target.describe()}",
        lambda: run_needle(target, options),
        markdown,
        junit_path,
        json_path,
        then,
    )


@main.command()
@click.option(
    "--engine", help="Engine command line (a fresh engine per phase) [default: the interleave check's at --scale 0.05]."
)
@click.option("--url", help="URL of a running server instead (both phases share it: not fresh).")
@click.option(
    "--against",
    "against_path",
    type=click.Path(dir_okay=False),
    default=str(independent.GOLDEN),
    show_default=True,
    help="Independent answers file (scripts/make_independent_answers.py).",
)
@click.option(
    "--logprob-tol",
    type=float,
    default=LOGPROB_TOL,
    show_default=True,
    help="Largest |engine - independent| chosen-token logprob (nats) where the tokens agree.",
)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds any one wait may take.")
@_output_options
def answers(engine, url, against_path, logprob_tol, timeout, near_tie, start_timeout, markdown, junit_path, json_path):
    """Long prompts answered solo and together must equal answers made outside this build (transformers, fp64)."""
    try:
        options = AnswersOptions(near_tie=near_tie, logprob_tol=logprob_tol, phase_timeout=timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    report = Report(meta={"check": "answers", "against": against_path})
    reference, expected = _load_or_fail(
        independent.load,
        against_path,
        "answers",
        f"against {Path(against_path).name}",
        report,
        markdown,
        junit_path,
        json_path,
    )
    needed = max(len(e.prompt) for e in expected) + int(reference["max_tokens"]) + 1  # the longest answer's context
    target = _target(engine, url, default_engine_command(0.05, needed), start_timeout)
    report.meta["engine"] = target.describe()
    report.meta["expected"] = independent.made_by(reference)
    _run_check(
        report,
        f"answers on {target.describe()}",
        lambda: run_answers(target, reference, expected, options),
        markdown,
        junit_path,
        json_path,
    )


_BUILD = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$", re.S)


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


@main.command()
@click.option(
    "--engine", "engines", multiple=True, required=True, help="NAME=COMMAND, once per build (first = reference)."
)
@click.option("--scale", type=float, default=1.0, show_default=True, help="Interleave sizes, as in `interleave`.")
@click.option("--tokens", type=int, default=64, show_default=True, help="Tokens per determinism answer.")
@click.option("--interleave-tokens", type=int, default=16, show_default=True, help="Tokens C, D and E generate.")
@click.option("--only", type=click.Choice(["interleave", "determinism", "answers"]), help="Run one check only.")
@click.option(
    "--against",
    "against_path",
    type=click.Path(dir_okay=False),
    default=str(independent.GOLDEN),
    show_default=True,
    help="Independent answers every build must match (the answers check).",
)
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds any one wait may take.")
@_output_options
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
        _progress(f"[{step.status}] {step.title}")

    def check():  # the independent answers are read after the progress line, and their error ends the run here
        answers = None
        if only in (None, "answers"):
            reference, expected = _load_or_fail(
                independent.load,
                against_path,
                "answers",
                f"against {Path(against_path).name}",
                report,
                markdown,
                junit_path,
                json_path,
            )
            answers = (reference, expected, AnswersOptions(near_tie=near_tie, phase_timeout=timeout))
        return run_builds(
            targets,
            iopts if only in (None, "interleave") else None,
            dopts if only in (None, "determinism") else None,
            on_step=on_step,
            answers=answers,
        )

    _run_check(
        report, "builds " + ", ".join(t.name for t in targets), check, markdown, junit_path, json_path, add_steps=False
    )


main.add_command(cache)


if __name__ == "__main__":
    main()
