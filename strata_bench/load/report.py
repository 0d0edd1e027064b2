"""Load report: a load bench directory's runs as the field's figures, from the JSON alone.

`build_load_report` recomputes each run's field metrics (field_metrics.py) from its raw request times and
returns plain data: per sweep point and arm the run values by round, their median and spread, the paired
comparison with the baseline arm (stats.py), and percentile tables over every round's requests pooled.
`render_load_markdown` prints the sweep table, the percentile tables, the comparisons and one line per
definition used.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tabulate import tabulate

from .field_metrics import DEFINITIONS, SLO, run_metrics
from .loops import LoadShape
from ..results import ResultsDir
from ..stats import compare_paired, summarize
from ..tables import comparison_line, fmt_value

# (figure key, column label, unit, better direction)
SWEEP_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("request_throughput", "requests/s", "req/s", "higher"),
    ("output_throughput", "output tok/s", "tok/s", "higher"),
    ("goodput", "goodput req/s", "req/s", "higher"),
    ("ttft_ms.p50", "TTFT p50 ms", "ms", "lower"),
    ("ttft_ms.p99", "TTFT p99 ms", "ms", "lower"),
    ("tpot_ms.p50", "TPOT p50 ms", "ms", "lower"),
    ("tpot_ms.p99", "TPOT p99 ms", "ms", "lower"),
    ("itl_ms.p50", "ITL (pooled gaps) p50 ms", "ms", "lower"),
    ("itl_ms.p99", "ITL (pooled gaps) p99 ms", "ms", "lower"),
    ("latency_ms.p50", "latency p50 ms", "ms", "lower"),
    ("latency_ms.p99", "latency p99 ms", "ms", "lower"),
)
PERCENTILE_ROWS = (
    ("ttft_ms", "TTFT (ms)"),
    ("tpot_ms", "TPOT (ms)"),
    ("itl_ms", "ITL, pooled gaps (ms)"),
    ("latency_ms", "request latency (ms)"),
    ("input_tokens_per_request", "input tokens"),
    ("output_tokens", "output tokens"),
    ("per_user_tps", "output tok/s per user"),
)
PERCENTILE_STATS = ("mean", "p50", "p90", "p95", "p99", "max")


def figure(metrics: dict[str, Any], key: str) -> float | None:
    """`ttft_ms.p50` -> metrics["ttft_ms"]["p50"]; None where the run has no such figure."""
    value: Any = metrics
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return None if value is None else float(value)


def build_load_report(
    results: ResultsDir, *, baseline: str | None = None, slo: SLO | None = None, seed: int = 0
) -> dict[str, Any]:
    meta = results.read_meta()
    config = meta["config"]
    if config.get("kind") != "load":
        raise ValueError(f"{results.path} holds a scenario bench, not a load bench: use `strata-bench report`")
    arms = [a["name"] for a in config["arms"]]
    baseline = baseline or arms[0]
    if baseline not in arms:
        raise ValueError(f"--baseline {baseline!r} is not an arm of this bench; arms: {', '.join(arms)}")
    slo = slo or SLO(**config.get("slo", {}))
    repeat = config["repeat"]
    runs = [r for r in results.runs() if r.get("status") != "failed"]
    failed = [f"{r['id']}: {r['failure'].splitlines()[0]}" for r in results.runs() if r.get("status") == "failed"]
    by_run = {(r["arm"], r["point"], r["round"]): run_metrics(r["requests"], slo) for r in runs}
    points = []
    for point in config["points"]:
        label = _label(point)
        columns = []
        for key, name, unit, better in SWEEP_COLUMNS:
            values = {arm: [figure(by_run.get((arm, label, rnd), {}), key) for rnd in range(repeat)] for arm in arms}
            columns.append(
                {
                    "key": key,
                    "label": name,
                    "unit": unit,
                    "better": better,
                    "values": values,
                    "summary": {arm: _asdict(summarize(v)) for arm, v in values.items()},
                    "vs_baseline": {
                        arm: compare_paired(values[arm], values[baseline], seed=seed).to_dict()
                        for arm in arms
                        if arm != baseline
                    },
                }
            )
        pooled = {
            arm: run_metrics([q for r in runs if r["arm"] == arm and r["point"] == label for q in r["requests"]], slo)
            for arm in arms
        }
        points.append(
            {
                "label": label,
                "shape": point,
                "columns": columns,
                "pooled": pooled,
                "runs": {arm: sum(1 for r in runs if r["arm"] == arm and r["point"] == label) for arm in arms},
            }
        )
    modes = sorted({r.get("prompt_mode", "?") for r in runs})
    return {
        "directory": str(results.path),
        "arms": arms,
        "baseline": baseline,
        "repeat": repeat,
        "workload": config["workload"],
        "keepalive": config["keepalive"],
        "slo": slo.to_dict(),
        "slo_text": slo.describe(),
        "prompt_modes": modes,
        "points": points,
        "failed_runs": failed,
    }


def _label(point: dict[str, Any]) -> str:
    return LoadShape.from_dict(point).label


def _asdict(summary: Any) -> dict[str, Any] | None:
    return asdict(summary) if summary is not None else None


def render_load_markdown(report: dict[str, Any]) -> str:
    w = report["workload"]
    out = [
        f"# strata-bench load report: {report['directory']}",
        "",
        f"Workload: input {w['input_len']} tokens ({'/'.join(report['prompt_modes'])} prompts), output "
        f"{w['output_len']} tokens, /v1/{'chat/' if w['endpoint'] == 'chat' else ''}completions, seed {w['seed']}; "
        f"connections: {'kept alive and reused' if report['keepalive'] else 'one per request'}; "
        f"{report['repeat']} round(s), arms in alternating order; SLOs for goodput: {report['slo_text']}.",
        "Cells: median over rounds (min–max when rounds differ).",
        "",
        "## Sweep",
        "",
    ]
    rows = []
    for point in report["points"]:
        for arm in report["arms"]:
            rows.append(
                [point["label"], arm]
                + [
                    _cell(c["summary"][arm], c["unit"])
                    for c in point["columns"]
                    if c["key"] != "goodput" or report["slo_text"] != "none"
                ]
            )
    headers = (
        ["load", "arm"]
        + [c["label"] for c in report["points"][0]["columns"] if c["key"] != "goodput" or report["slo_text"] != "none"]
        if report["points"]
        else []
    )
    out.append(tabulate(rows, headers=headers, tablefmt="github"))
    for point in report["points"]:
        for arm in report["arms"]:
            pooled = point["pooled"][arm]
            out += [
                "",
                f"## Percentiles: {arm} at {point['label']} ({pooled['completed']} requests of "
                f"{point['runs'][arm]} run(s) pooled, {pooled['failed']} failed)",
                "",
                percentile_table(pooled, rates=point["runs"][arm] == 1),
            ]
    lines = [
        line
        for point in report["points"]
        for c in point["columns"]
        for arm in report["arms"]
        if arm != report["baseline"]
        for line in [comparison_line({**c, "label": f"{point['label']} {c['label']}"}, arm, report["baseline"])]
        if line
    ]
    if lines:
        out += ["", f"## Paired by round against {report['baseline']}", ""] + lines
    if report["failed_runs"]:
        out += ["", "## Failed runs", ""] + [f"- {line}" for line in report["failed_runs"]]
    out += ["", "## Definitions", ""] + [
        f"- {DEFINITIONS[k]}" for k in DEFINITIONS if k != "goodput" or report["slo_text"] != "none"
    ]
    return "\n".join(out) + "\n"


def percentile_table(metrics: dict[str, Any], rates: bool = True) -> str:
    """Distributions as rows; with `rates` (one run: pooled rounds share no clock) its throughputs under it."""
    rows = []
    for key, label in PERCENTILE_ROWS:
        dist = metrics.get(key)
        rows.append([label] + [fmt_value(dist[s], "ms", 4) if dist else "—" for s in PERCENTILE_STATS])
    tail = [
        ["output token throughput (tok/s)", fmt_value(metrics.get("output_throughput"), "ms", 4)],
        ["request throughput (req/s)", fmt_value(metrics.get("request_throughput"), "ms", 4)],
    ]
    if "goodput" in metrics:
        tail.append(["goodput (req/s)", fmt_value(metrics.get("goodput"), "ms", 4)])
    table = tabulate(rows, headers=["metric", *PERCENTILE_STATS], tablefmt="github")
    return table + "\n\n" + tabulate(tail, headers=["whole run", "value"], tablefmt="github") if rates else table


def _cell(summary: dict[str, Any] | None, unit: str) -> str:
    if summary is None:
        return "—"
    text = fmt_value(summary["median"], unit)
    if summary["n"] > 1 and summary["min"] != summary["max"]:
        text += f" ({fmt_value(summary['min'], unit)}–{fmt_value(summary['max'], unit)})"
    return text
