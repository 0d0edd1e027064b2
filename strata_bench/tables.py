"""Render a report (report.py's data) as markdown like the spec's tables, as CSV, or as JSON.

Markdown, per scenario: rows are metrics, columns arms, each cell the median with the min-max spread
(bold where the arm beat the baseline in every pair); under it one line per metric and arm with "lower
in k of n pairs", the sign test, Wilcoxon and the bootstrap interval of the median ratio; then the
run-to-run spread (every run's value, by round) and the greedy-token check.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tabulate import tabulate

_UNIT_SUFFIX = {"s": " s", "ms": " ms", "tok/s": " tok/s", "MB": " MB", "tok": "", "": ""}


def fmt_value(value: float | None, unit: str, digits: int = 3) -> str:
    if value is None:
        return "—"
    if unit in ("tok", ""):
        return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"
    if abs(value) >= 10**digits:  # 12345 ms, not 1.23e+04
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def fmt_p(p: float | None) -> str:
    return "n/a" if p is None else (f"{p:.2g}" if p >= 0.001 else "<0.001")


def _cell(metric: dict[str, Any], arm: str, baseline: str, repeat: int, failed: bool = False) -> str:
    if failed:
        return "FAILED"
    summary = metric["summary"][arm]
    if summary is None:
        return "—"
    unit = metric["unit"]
    text = fmt_value(summary["median"], unit) + _UNIT_SUFFIX[unit]
    comp = metric["vs_baseline"].get(arm)
    if comp and comp["n_pairs"] and comp[metric["better"]] == comp["n_pairs"]:
        text = f"**{text}**"
    if summary["n"] > 1 and summary["min"] != summary["max"]:
        text += f" ({fmt_value(summary['min'], unit, 4)}–{fmt_value(summary['max'], unit, 4)})"
    if summary["n"] < repeat:
        text += f" [n={summary['n']}]"
    return text


def comparison_line(metric: dict[str, Any], arm: str, baseline: str) -> str | None:
    comp = metric["vs_baseline"].get(arm)
    if not comp or not comp["n_pairs"]:
        return None
    word = metric["better"]
    k = comp[word]
    line = (
        f"- {metric['label']}: {arm} {word} in {k} of {comp['n_pairs']} pairs"
        + (f" ({comp['ties']} tied)" if comp["ties"] else "")
        + f"; sign test p={fmt_p(comp['sign_p'])}, Wilcoxon p={fmt_p(comp['wilcoxon_p'])}"
    )
    if comp["ratio_median"] is not None:
        line += f"; {arm}/{baseline} median ratio {comp['ratio_median']:.3g}"
        if comp["ratio_ci"] is not None:
            lo, hi = comp["ratio_ci"]
            line += f" (95% bootstrap CI {lo:.3g}–{hi:.3g})"
    return line


def render_markdown(report: dict[str, Any]) -> str:
    arms, baseline, repeat = report["arms"], report["baseline"], report["repeat"]
    out = [f"# strata-bench report: {report['directory']}", ""]
    scale_note = f"scale {report['scale']:g}" + (
        f", time scale {report['time_scale']:g} (times in modelled seconds)" if report["time_scale"] != 1 else ""
    )
    out.append(
        f"Arms: {', '.join(arms)} (baseline {baseline}); {repeat} round(s), order reversed every round; "
        f"{scale_note}; pause threshold {report['pause_threshold_s']:g} s; "
        f"{report['runs_recorded']} of {report['runs_planned']} runs recorded."
    )
    out.append("Cells: median (min–max) over runs; bold: better than the baseline in every pair.")
    for scenario in report["scenarios"]:
        out += ["", f"## {scenario['name']}", ""]
        if scenario["description"]:
            out += [scenario["description"], ""]
        failed = set(scenario.get("failed_arms") or [])
        rows = [
            [m["label"]] + [_cell(m, arm, baseline, repeat, arm in failed) for arm in arms] for m in scenario["metrics"]
        ]
        rows.append(["runs"] + [_runs_cell(scenario["runs"][arm]) for arm in arms])
        out.append(tabulate(rows, headers=[""] + arms, tablefmt="github", colalign=["left"] + ["right"] * len(arms)))
        lines = [
            line
            for m in scenario["metrics"]
            for arm in arms
            if arm != baseline
            for line in [comparison_line(m, arm, baseline)]
            if line
        ]
        if lines:
            out += [""] + lines
        out += _problems(scenario, arms)
        if any(v is not None for m in scenario["metrics"] for vs in m["values"].values() for v in vs):
            out += ["", f"### {scenario['name']}: run-to-run spread", "", _spread_table(scenario, arms, repeat)]
    out += _definitions(report)
    if report.get("tokens"):
        out += ["", report["tokens"]["summary"]]
    else:
        out += ["", "Greedy tokens: not compared (--cold-per-arm gives each arm its own prompts)."]
    return "\n".join(out) + "\n"


def render_brief(report: dict[str, Any]) -> str:
    """The medians tables alone, for a page in docs/: where and when the runs were made, then per scenario the
    median (min-max) per metric and arm and each other arm's median ratio to the baseline."""
    arms, baseline = report["arms"], report["baseline"]
    others = [arm for arm in arms if arm != baseline]
    out = [_measured_on(report.get("provenance") or {}), ""]
    out.append(
        f"Arms: {', '.join(arms)}; {report['repeat']} round(s) in ABBA order; scale {report['scale']:g}; "
        f"{report['runs_recorded']} of {report['runs_planned']} runs recorded. Cells: median (min–max) over runs; "
        f"bold: better than {baseline} in every pair; {', '.join(f'{a} / {baseline}' for a in others)}: the median "
        "of the paired ratios."
    )
    for scenario in report["scenarios"]:
        failed = set(scenario.get("failed_arms") or [])
        rows = []
        for m in scenario["metrics"]:
            ratios = [(m["vs_baseline"].get(arm) or {}).get("ratio_median") for arm in others]
            rows.append(
                [m["label"]]
                + [_cell(m, arm, baseline, report["repeat"], arm in failed) for arm in arms]
                + ["" if r is None else f"{r:.2f}x" for r in ratios]
            )
        rows.append(["runs"] + [_runs_cell(scenario["runs"][arm]) for arm in arms] + [""] * len(others))
        headers = [""] + arms + [f"{arm} / {baseline}" for arm in others]
        out += ["", f"**{scenario['name']}**", ""]
        out.append(
            tabulate(rows, headers=headers, tablefmt="github", colalign=["left"] + ["right"] * (len(headers) - 1))
        )
        out += _problems(scenario, arms)
    if report.get("tokens"):
        out += ["", report["tokens"]["summary"]]
    return "\n".join(out) + "\n"


def _measured_on(provenance: dict[str, Any]) -> str:
    device, packages = provenance.get("device") or {}, provenance.get("packages") or {}
    revision = ((provenance.get("git") or {}).get("cwd") or {}).get("revision") or "unknown"
    model = f" ({device['cpu_model']})" if device.get("cpu_model") else ""
    parts = [f"{device.get('cpu', 'unknown CPU')}{model}, {device.get('cpu_count', '?')} CPU(s)"]
    if device.get("cpu_flags") is not None:
        parts.append("flags " + (" ".join(device["cpu_flags"]) or "none of avx avx2 fma avx512*"))
    forced = provenance.get("isa_env") or {}
    if forced:
        parts.append("run at " + " ".join(f"{k}={v}" for k, v in forced.items()))
    parts += [f"torch {packages.get('torch')}", f"strata {revision[:7]}", str(provenance.get("date_utc", "undated"))]
    return "Measured on: " + "; ".join(parts) + "."


def _definitions(report: dict[str, Any]) -> list[str]:
    """One line per metric family the tables showed (metrics.DEFINITIONS)."""
    from .metrics import DEFINITIONS

    shown = {m["key"].split(".")[0] for s in report["scenarios"] for m in s["metrics"]}
    family = {
        "itl_p50_ms": "itl_ms",
        "itl_p99_ms": "itl_ms",
        "itl_max_ms": "itl_ms",
        "ttft_cached_p90_s": "ttft_cached_p50_s",
    }
    keys = dict.fromkeys(family.get(k, k) for k in shown if family.get(k, k) in DEFINITIONS)
    return ["", "Definitions:"] + [f"- {DEFINITIONS[k]}" for k in DEFINITIONS if k in keys] if keys else []


def _runs_cell(runs: dict[str, Any]) -> str:
    parts = [f"{runs['ok'] - len(runs.get('serialised') or [])} ok"]
    if runs.get("serialised"):
        parts.append(f"{len(runs['serialised'])} serialised")
    if runs.get("missed"):
        parts.append(f"{len(runs['missed'])} missed the join (left out)")
    if runs["errors"]:
        parts.append(f"{runs['errors']} with request errors")
    if runs["failed"]:
        parts.append(f"{runs['failed']} failed")
    return ", ".join(parts)


def _problems(scenario: dict[str, Any], arms: list[str]) -> list[str]:
    out = []
    for arm in scenario.get("failed_arms") or []:
        runs = scenario["runs"][arm]
        why = [
            f"{runs['failed']} failed run(s)" if runs["failed"] else "",
            f"{runs['errors']} run(s) with request errors" if runs["errors"] else "",
            f"{len(runs['serialised'])} serialised run(s) (the server ran the streams one at a time)"
            if runs.get("serialised")
            else "",
        ]
        out.append(f"- **{arm} FAILED**: {', '.join(w for w in why if w)}; no statistics are computed from it")
    for arm in arms:
        for line in scenario["runs"][arm]["failures"]:
            out.append(f"- failed run: {line}")
        for line in scenario["runs"][arm].get("missed") or []:
            out.append(f"- run left out of the medians: {line}")
        for line in scenario["runs"][arm].get("client_stalls") or []:
            out.append(f"- run whose timing the bench's client set in part: {line}")
        for line in scenario["runs"][arm]["request_errors"][:5]:
            out.append(f"- request error: {line}")
    return [""] + out if out else []


def _spread_table(scenario: dict[str, Any], arms: list[str], repeat: int) -> str:
    rows = []
    for m in scenario["metrics"]:
        if m["better"] is None:
            continue  # event counts: the table above has them
        for arm in arms:
            values = m["values"][arm]
            rows.append([m["label"], arm] + [fmt_value(v, m["unit"], 4) for v in values])
    return tabulate(rows, headers=["metric", "arm"] + [f"r{i}" for i in range(repeat)], tablefmt="github")


def render_csv(report: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        [
            "scenario",
            "metric",
            "label",
            "unit",
            "arm",
            "n",
            "median",
            "min",
            "max",
            "values",
            "baseline",
            "pairs",
            "better_pairs",
            "sign_p",
            "wilcoxon_p",
            "ratio_median",
            "ratio_ci_low",
            "ratio_ci_high",
        ]
    )
    for scenario in report["scenarios"]:
        for m in scenario["metrics"]:
            for arm in report["arms"]:
                s = m["summary"][arm] or {}
                c = m["vs_baseline"].get(arm) or {}
                better = c.get(m["better"]) if m["better"] else None
                ci = c.get("ratio_ci") or (None, None)
                writer.writerow(
                    [
                        scenario["name"],
                        m["key"],
                        m["label"],
                        m["unit"],
                        arm,
                        s.get("n", 0),
                        s.get("median"),
                        s.get("min"),
                        s.get("max"),
                        ";".join("" if v is None else repr(v) for v in m["values"][arm]),
                        report["baseline"],
                        c.get("n_pairs"),
                        better,
                        c.get("sign_p"),
                        c.get("wilcoxon_p"),
                        c.get("ratio_median"),
                        ci[0],
                        ci[1],
                    ]
                )
    return buf.getvalue()


def render(report: dict[str, Any], fmt: str, brief: bool = False) -> str:
    if brief:
        if fmt != "md":
            raise ValueError("brief is a markdown table only (--format md)")
        return render_brief(report)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "csv":
        return render_csv(report)
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    raise ValueError(f"format must be md, json or csv, got {fmt!r}")
