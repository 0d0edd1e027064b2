"""`strata-bench load` and `strata-bench load-report`: steady-load runs and their field-metric reports.

`load` runs one or more arms (engine command lines, a fresh engine per run, or URLs) at each sweep point
(`--concurrency 1,2,4,8`: closed loops; `--rate 1,2`: open loops), `--repeat` rounds in alternating arm
order, writes raw JSON, then the report (DIR/report.md) and the latency-throughput plot (DIR/sweep.png).
`load-report` renders them again from the JSON alone. Bad input is a click.UsageError (exit 2).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import click

from ..arms import ArmError, parse_arm
from .field_metrics import SLO
from ..engines.launcher import LaunchError, check_url
from .loops import LoadShape
from .runner import LoadConfig, run_all, start
from ..results import ResultsDir, ResultsError
from .workload import LengthSpec, Workload


def _numbers(text: str | None, kind: type, flag: str) -> list[Any]:
    if not text:
        return []
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.UsageError(f"{flag} {text!r}: expected comma-separated numbers like 1,2,4,8") from None


def slo_options(fn: Any) -> Any:
    for name, what in (("latency", "request latency"), ("tpot", "TPOT"), ("ttft", "TTFT")):
        fn = click.option(
            f"--slo-{name}-ms",
            type=click.FloatRange(min=0, min_open=True),
            help=f"goodput counts requests whose {what} is at most this (ms)",
        )(fn)
    return fn


@click.command("load")
@click.option(
    "--arm",
    "arm_texts",
    multiple=True,
    required=True,
    metavar="NAME=COMMAND|NAME=@URL",
    help="one or more arms; two or more compare, paired by round",
)
@click.option("--concurrency", help="closed loops at these concurrencies, e.g. 1,2,4,8 (a sweep)")
@click.option("--rate", help="open loops at these request rates per second, e.g. 0.5,1,2 (a sweep)")
@click.option(
    "--arrivals",
    type=click.Choice(["poisson", "constant"]),
    default="poisson",
    show_default=True,
    help="open loops: arrival process",
)
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    help="open loops: hold a request until fewer than this are in flight",
)
@click.option("--requests", type=click.IntRange(min=1), help="requests per run (stop issuing after this many)")
@click.option(
    "--duration", type=click.FloatRange(min=0, min_open=True), help="seconds per run (stop issuing after this long)"
)
@click.option(
    "--input-len", default="256", show_default=True, help="input tokens: N, uniform:LOW:HIGH or normal:MEAN:STD"
)
@click.option(
    "--output-len", default="64", show_default=True, help="output tokens (max_tokens, EOS ignored): same forms"
)
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option(
    "--keepalive/--no-keepalive",
    default=False,
    show_default=True,
    help="reuse connections (HTTP/1.1 keep-alive) or open one per request",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="rounds; arms alternate order every round",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="requests sent one at a time before each run's clock starts",
)
@click.option("--seed", type=int, default=0, show_default=True, help="seeds the lengths, prompts and arrivals")
@slo_options
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="bench directory (default bench-out/load-DATE)"
)
@click.option("--health-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True)
@click.option("--stop-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True)
@click.option("--quiet", is_flag=True, help="no progress lines on stderr")
def load(
    arm_texts: tuple[str, ...],
    concurrency: str | None,
    rate: str | None,
    arrivals: str,
    max_concurrency: int | None,
    requests: int | None,
    duration: float | None,
    input_len: str,
    output_len: str,
    endpoint: str,
    keepalive: bool,
    repeat: int,
    warmup: int,
    seed: int,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    slo_latency_ms: float | None,
    out: Path | None,
    health_timeout: float,
    stop_timeout: float,
    quiet: bool,
) -> None:
    """Steady load: closed loops (--concurrency) or open loops (--rate), one JSON per run, the field's metrics."""
    concurrencies, rates = _numbers(concurrency, int, "--concurrency"), _numbers(rate, float, "--rate")
    if bool(concurrencies) == bool(rates):
        raise click.UsageError("give --concurrency (closed loops) or --rate (open loops), one of them")
    try:
        arms = tuple(parse_arm(t) for t in arm_texts)
        for arm in arms:
            if arm.is_url:
                check_url(arm.url, f"arm '{arm.name}' (@{arm.url})")
        common = {"requests": requests, "duration_s": duration, "seed": seed}
        points = tuple(LoadShape("closed", concurrency=c, **common) for c in concurrencies) or tuple(
            LoadShape("open", rate=r, arrivals=arrivals, concurrency=max_concurrency, **common) for r in rates
        )
        workload = Workload(
            LengthSpec.parse(input_len, "--input-len"), LengthSpec.parse(output_len, "--output-len"), endpoint, seed
        )
        config = LoadConfig(
            arms=arms,
            points=points,
            workload=workload,
            keepalive=keepalive,
            repeat=repeat,
            warmup=warmup,
            slo=SLO(slo_ttft_ms, slo_tpot_ms, slo_latency_ms),
            health_timeout_s=health_timeout,
            stop_timeout_s=stop_timeout,
        )
    except (ArmError, LaunchError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    results = ResultsDir(out or Path("bench-out") / f"load-{dt.datetime.now():%Y%m%d-%H%M%S}")
    try:
        start(config, results, sys.argv)
    except ResultsError as exc:
        raise click.UsageError(str(exc)) from None
    say = (lambda _: None) if quiet else (lambda line: click.echo(line, err=True))
    counts = run_all(config, results, say)
    text = _render(results, None, SLO(), "md", results.path / "sweep.png")
    (results.path / "report.md").write_text(text)
    click.echo(text)
    say(
        f"done: {counts['ok']} ok, {counts['errors']} with request errors, {counts['failed']} failed; "
        f"{results.path / 'report.md'}, {results.path / 'sweep.png'}"
    )
    sys.exit(1 if counts["failed"] else 0)


@click.command("load-report")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--baseline", help="the arm the others are paired with (default: the first)")
@slo_options
@click.option(
    "--plot", type=click.Path(dir_okay=False, path_type=Path), help="also write the latency-throughput PNG here"
)
def load_report(
    directory: Path,
    fmt: str,
    baseline: str | None,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    slo_latency_ms: float | None,
    plot: Path | None,
) -> None:
    """A load bench's tables (sweep, percentiles, pairs, definitions) from its JSON alone; SLOs may change after."""
    click.echo(
        _render(ResultsDir(directory), baseline, SLO(slo_ttft_ms, slo_tpot_ms, slo_latency_ms), fmt, plot), nl=False
    )


def _render(results: ResultsDir, baseline: str | None, slo: SLO, fmt: str, plot: Path | None) -> str:
    from .report import build_load_report, render_load_markdown

    try:
        report = build_load_report(results, baseline=baseline, slo=slo if slo.any else None)
    except (ResultsError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if plot is not None:
        from .plot import plot_sweep

        plot_sweep(report, plot)
    return render_load_markdown(report) if fmt == "md" else json.dumps(report, indent=2) + "\n"
