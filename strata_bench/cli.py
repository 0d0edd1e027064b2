"""strata-bench: A/B runs of engine builds in alternating order, stall metrics from every token, tables, plots.

Subcommands: run, report, plot, preset, demo, scenarios; each a small function over runner.py,
report.py + tables.py and plot.py. Bad input (an unknown scenario, a malformed arm, an unreachable URL,
a directory that holds another bench) is a click.UsageError, exit 2, before anything runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import sys
from pathlib import Path
from typing import Any, Callable

import click

from .arms import ArmError, parse_arms
from .engines.launcher import LaunchError, check_url, interrupt_on_sigterm
from .presets import PresetError, available_presets, load_preset
from .progress import Progress
from .report import ReportError, build_report
from .results import ResultsDir, ResultsError
from .runner import BenchConfig, run_bench, start_or_resume
from .scenarios import ScenarioError, available_scenarios, load_scenario, parse_scenario_list
from .tables import render
from .timeline import render_timeline_md, request_timeline


def bench_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by run, preset and demo."""
    options = [
        click.option("--repeat", type=click.IntRange(min=1), help="rounds: every arm runs every scenario once a round"),
        click.option(
            "--scale",
            type=click.FloatRange(min=0, min_open=True),
            help="multiply every length and delay (prompts, streams' decode, joiners' delays)",
        ),
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            help="bench directory (default bench-out/NAME-DATE)",
        ),
        click.option("--resume", is_flag=True, help="continue an interrupted bench in --out: run only what is missing"),
        click.option(
            "--pause-threshold",
            type=click.FloatRange(min=0),
            default=0.5,
            show_default=True,
            help="seconds; gaps strictly over it count as pauses",
        ),
        click.option(
            "--health-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=300.0,
            show_default=True,
            help="seconds an engine may take to answer /health",
        ),
        click.option(
            "--run-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=3600.0,
            show_default=True,
            help="seconds one run may take before it is recorded as failed",
        ),
        click.option(
            "--stop-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=10.0,
            show_default=True,
            help="seconds between SIGTERM and SIGKILL when stopping an engine",
        ),
        click.option("--quiet", is_flag=True, help="no progress lines on stderr"),
        click.option("--no-report", is_flag=True, help="do not print the report when the bench ends"),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def main() -> None:
    """Benchmark how individual streams pause while cold prompts join, across engine builds (arms)."""
    interrupt_on_sigterm()


@main.command()
@click.option(
    "--arm",
    "arm_texts",
    multiple=True,
    metavar="NAME=COMMAND|NAME=@URL",
    help="an arm (one measures a server, two or more compare); COMMAND gets --host/--port appended unless it contains {port}",
)
@click.option(
    "--scenarios",
    "scenario_list",
    help="comma-separated names or .json paths (default: two_joiners,followup,read_alone)",
)
@click.option(
    "--preset", help="take arms, scenarios, rounds and scale from a preset (see `strata-bench preset --list`)"
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0, min_open=True),
    help="modelled seconds per wall second of sim engines: delays divided, times reported modelled",
)
@click.option(
    "--cold-per-arm",
    is_flag=True,
    help="prompts differ per arm too (for URL arms whose server caches prefixes); disables the token check",
)
@bench_options
def run(
    arm_texts: tuple[str, ...],
    scenario_list: str | None,
    preset: str | None,
    time_scale: float | None,
    cold_per_arm: bool,
    **opts: Any,
) -> None:
    """Run every arm on every scenario, --repeat rounds, a fresh engine per run; JSON in --out."""
    if opts["resume"] and not arm_texts and not preset and opts["out"] is not None:
        config = _resumed_config(opts["out"])
    else:
        config = _config(arm_texts, scenario_list, preset, time_scale, cold_per_arm, opts)
    sys.exit(_execute(config, opts))


@main.command()
@click.argument("name", required=False)
@click.option("--list", "list_only", is_flag=True, help="list the presets")
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0, min_open=True),
    help="run the simulated engine this many times faster than modelled time",
)
@click.option("--scenarios", "scenario_list", help="a subset of the preset's scenarios")
@click.option("--arms", "arm_list", help="a subset of the preset's arms (comma-separated names, as --list shows)")
@bench_options
def preset(
    name: str | None,
    list_only: bool,
    time_scale: float | None,
    scenario_list: str | None,
    arm_list: str | None,
    **opts: Any,
) -> None:
    """Run a preset bench (e.g. pr2050: the spec's table on the simulated executor)."""
    if list_only or not name:
        for key in available_presets():
            p = load_preset(key)
            click.echo(
                f"{key}: {p.description}\n  arms: {', '.join(a for a, _ in p.arms)}; scenarios: "
                f"{', '.join(p.scenarios)}; repeat {p.repeat}; scale {p.scale:g}"
            )
        return
    sys.exit(_execute(_config((), scenario_list, name, time_scale, False, opts, arm_list), opts))


@main.command()
@bench_options
def demo(**opts: Any) -> None:
    """The README's main job: release vs pieces on the embedded model (CPU, two stages, two groups).

    Three ABBA rounds, about a minute on two cores; three pairs cannot make a sign test significant
    (p >= 0.25), so give --repeat 5 or more for a claim in a PR."""
    config = _config((), None, "demo", None, False, opts)
    code = _execute(config, {**opts, "no_report": True})
    if code == 130:  # interrupted: the runs so far are saved, say nothing more
        sys.exit(code)
    results = ResultsDir(opts["out"])
    from .plot import plot_dir  # matplotlib takes a second to import: only where a plot is drawn

    click.echo(render(build_report(results), "md"))
    paths = [p for p in plot_dir(results) if p.name.endswith("-arms.png")]
    click.echo(
        "Timelines (arms stacked, per round): " + (", ".join(str(p) for p in paths) or "none (no run succeeded)")
    )
    sys.exit(code)


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "json", "csv"]), default="md", show_default=True)
@click.option(
    "--pause-threshold", type=click.FloatRange(min=0), help="recompute with another threshold (default: the bench's)"
)
@click.option("--baseline", help="the arm the others are compared with (default: the first)")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="write here instead of stdout")
@click.option("--seed", type=int, default=0, show_default=True, help="bootstrap seed")
@click.option(
    "--brief",
    is_flag=True,
    help="markdown: the medians tables alone, with each arm's median ratio to the baseline and the CPU the runs "
    "were made on (the tables a page in docs/measurements/ renders from kept runs)",
)
@click.option(
    "--requests",
    "requests_of",
    metavar="SCENARIO",
    help="instead of the tables: per run, when each of SCENARIO's joiners was sent and got its first token "
    "(markdown), to see whether one joiner waited for another's read",
)
def report(
    directory: Path,
    fmt: str,
    pause_threshold: float | None,
    baseline: str | None,
    output: Path | None,
    seed: int,
    brief: bool,
    requests_of: str | None,
) -> None:
    """Tables from a bench directory's JSON alone: median (min-max) per metric and arm, pair counts, p-values."""
    try:
        if requests_of is not None:
            text = render_timeline_md(request_timeline(ResultsDir(directory), requests_of))
        else:
            text = render(
                build_report(ResultsDir(directory), pause_threshold_s=pause_threshold, baseline=baseline, seed=seed),
                fmt,
                brief,
            )
    except (ResultsError, ReportError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if output:
        output.write_text(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="where the PNGs go (default DIRECTORY/plots)"
)
@click.option("--run", "only", help="only runs whose id contains this")
@click.option("--pause-threshold", type=click.FloatRange(min=0), help="mark gaps over this (default: the bench's)")
def plot(directory: Path, out: Path | None, only: str | None, pause_threshold: float | None) -> None:
    """PNG token timelines: one per run, and one per scenario and round with the arms stacked."""
    from .plot import plot_dir

    try:
        paths = plot_dir(ResultsDir(directory), out, threshold_s=pause_threshold, only=only)
    except ResultsError as exc:
        raise click.UsageError(str(exc)) from None
    for path in paths:
        click.echo(str(path))
    if not paths:
        click.echo("no run with requests to plot", err=True)


from .load.cli import load, load_report  # noqa: E402  (steady-load runs: their own module)

main.add_command(load)
main.add_command(load_report)


@main.command("scenarios")
def list_scenarios() -> None:
    """List the bundled scenarios."""
    for name in available_scenarios():
        s = load_scenario(name)
        click.echo(f"{name}: {s.description}")


def _config(
    arm_texts: tuple[str, ...],
    scenario_list: str | None,
    preset_name: str | None,
    time_scale: float | None,
    cold_per_arm: bool,
    opts: dict[str, Any],
    arm_list: str | None = None,
) -> BenchConfig:
    """Validate everything up front: a bad arm, scenario, preset or URL stops here (exit 2). `arm_list`: a subset
    of the preset's arms."""
    try:
        repeat, scale, ts = opts["repeat"], opts["scale"], time_scale
        if preset_name:
            if arm_texts:
                raise click.UsageError("--preset brings its own arms; drop --arm or --preset")
            chosen = load_preset(preset_name)
            p, left_out = (chosen.only(arm_list) if arm_list else chosen).installed()
            for line in left_out:
                click.echo(f"strata-bench: {line}", err=True)
            ts = p.time_scale if ts is None else ts
            arm_texts = tuple(p.arm_specs(ts))
            scenario_list = scenario_list or ",".join(p.scenarios)
            repeat, scale = repeat or p.repeat, scale or p.scale
        arms = parse_arms(list(arm_texts))
        scale = scale or 1.0
        scenarios = [s.scaled(scale) for s in parse_scenario_list(scenario_list or "two_joiners,followup,read_alone")]
        for arm in arms:
            if arm.is_url:
                check_url(arm.url, arm.label)
        config = BenchConfig(
            arms=tuple(arms),
            scenarios=tuple(scenarios),
            repeat=repeat or 1,
            scale=scale,
            time_scale=ts or 1.0,
            pause_threshold_s=opts["pause_threshold"],
            health_timeout_s=opts["health_timeout"],
            run_timeout_s=opts["run_timeout"],
            stop_timeout_s=opts["stop_timeout"],
            cold_per_arm=cold_per_arm,
            preset=preset_name,
        )
    except (ArmError, ScenarioError, PresetError, LaunchError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if opts["out"] is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        opts["out"] = Path("bench-out") / f"{preset_name or 'run'}-{stamp}"
    return config


def _resumed_config(out: Path) -> BenchConfig:
    try:
        config = BenchConfig.from_dict(ResultsDir(out).read_meta()["config"])
        for arm in config.arms:
            if arm.is_url:
                check_url(arm.url, arm.label)
    except (ResultsError, KeyError, ValueError, LaunchError) as exc:
        raise click.UsageError(f"--resume: cannot continue the bench in {out}: {exc}") from None
    return config


def _execute(config: BenchConfig, opts: dict[str, Any]) -> int:
    """Run the bench; 0 when every run completed, 1 when some failed, 130 on Ctrl-C."""
    results = ResultsDir(opts["out"])
    try:
        meta = start_or_resume(config, results, sys.argv, opts["resume"])
    except ResultsError as exc:
        raise click.UsageError(str(exc)) from None
    progress = Progress(len(meta["plan"]), quiet=opts["quiet"])
    progress.message(f"strata-bench: {len(meta['plan'])} runs into {results.path}")
    try:
        counts = run_bench(config, results, meta, progress)
    except KeyboardInterrupt:
        progress.message(
            f"interrupted: finished runs are saved in {results.path}; continue with "
            f"`strata-bench run --resume --out {results.path}`"
        )
        return 130
    report = build_report(results)
    text = render(report, "md")
    (results.path / "report.md").write_text(text)
    if not opts["no_report"]:
        click.echo(text)
    missed = f"{counts['missed']} missed the join (left out of the medians), " if counts.get("missed") else ""
    progress.message(
        f"done: {counts['ok']} ok, {counts['errors']} with request errors, {counts['failed']} failed, {missed}"
        f"{counts['skipped']} already there; report in {results.path / 'report.md'}"
    )
    failed_arms = sorted({arm for sc in report["scenarios"] for arm in sc["failed_arms"]})
    if failed_arms:
        progress.message(
            f"FAILED arm(s): {', '.join(failed_arms)} (failed runs, request errors or serialised runs; "
            "see the report): exit 1"
        )
        return 1
    return 0
