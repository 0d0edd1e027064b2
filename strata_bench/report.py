"""Report: a bench directory's runs aggregated per scenario, metric and arm, from the JSON alone.

`build_report` recomputes every run's metrics from its raw token times (so `--pause-threshold` can change
after the fact) and returns plain data: per metric and arm the values by round, median and min-max, and
per non-baseline arm the paired comparison with the baseline (stats.py). tables.py renders it.
An arm with a failed run, a request error or a serialised run (the server ran the streams one at a time)
is reported as failed: no statistic, pair count or win is computed from it. A `missed` run (the joiners did
not arrive while the streams decode) is named with its reason and left out of the medians and pairs; the
arm's other runs still count. Joiner labels carry the prompt
lengths the servers measured (usage), not only the ones asked for.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .equality import check_tokens
from .metrics import compute_metrics, metric_specs
from .results import ResultsDir
from .stats import compare_paired, summarize


MISSED = "missed"  # a run's status when the joiners did not arrive while the streams decode (run_verdicts.missed_join)


class ReportError(ValueError):
    """Bad report options (an unknown baseline arm)."""


def build_report(
    results: ResultsDir, *, pause_threshold_s: float | None = None, baseline: str | None = None, seed: int = 0
) -> dict[str, Any]:
    meta = results.read_meta()
    config = meta["config"]
    arms = [a["name"] for a in config["arms"]]
    if baseline is None:
        baseline = arms[0]
    elif baseline not in arms:
        raise ReportError(f"--baseline {baseline!r} is not an arm of this bench; arms: {', '.join(arms)}")
    threshold = config.get("pause_threshold_s", 0.5) if pause_threshold_s is None else pause_threshold_s
    runs = results.runs()
    scenarios = [
        _scenario_report(
            scenario,
            [r for r in runs if r.get("scenario") == scenario["name"]],
            arms,
            baseline,
            config["repeat"],
            threshold,
            seed,
        )
        for scenario in config["scenarios"]
    ]
    return {
        "directory": str(results.path),
        "arms": arms,
        "baseline": baseline,
        "repeat": config["repeat"],
        "scale": config.get("scale", 1.0),
        "time_scale": config.get("time_scale", 1.0),
        "pause_threshold_s": threshold,
        "preset": config.get("preset"),
        "runs_planned": len(meta.get("plan", [])),
        "runs_recorded": len(runs),
        "provenance": meta.get("provenance", {}),
        "scenarios": scenarios,
        "tokens": check_tokens(runs, arms).to_dict() if not config.get("cold_per_arm") else None,
    }


def _scenario_report(
    scenario: dict[str, Any],
    runs: list[dict[str, Any]],
    arms: list[str],
    baseline: str,
    repeat: int,
    threshold: float,
    seed: int,
) -> dict[str, Any]:
    failed_arms = {r["arm"] for r in runs if r.get("status") not in ("ok", MISSED) or serialised(r)}
    usable = [r for r in runs if r.get("arm") not in failed_arms and r.get("status") == "ok"]
    has_events = any(r.get("engine_events") is not None for r in usable)
    has_rss = any(r.get("peak_rss_bytes") is not None for r in usable)
    specs = metric_specs(scenario, has_events, measured_lengths(scenario, runs), has_rss)
    by_arm_round = {(r["arm"], r["round"]): compute_metrics(r, threshold) for r in usable}
    metrics = []
    for spec in specs:
        values = {arm: [by_arm_round.get((arm, rnd), {}).get(spec.key) for rnd in range(repeat)] for arm in arms}
        summaries = {arm: summarize(v) for arm, v in values.items()}
        if spec.better is None and not any(v for vs in values.values() for v in vs):
            continue  # an engine event that never happened in this scenario: no row
        comparisons = {
            arm: compare_paired(values[arm], values[baseline], seed=seed).to_dict()
            for arm in arms
            if arm != baseline and spec.better is not None and not {arm, baseline} & failed_arms
        }
        metrics.append(
            {
                "key": spec.key,
                "label": spec.label,
                "unit": spec.unit,
                "better": spec.better,
                "values": values,
                "summary": {arm: (asdict(s) if s else None) for arm, s in summaries.items()},
                "vs_baseline": comparisons,
            }
        )
    runs_by_arm = {}
    for arm in arms:
        mine = [r for r in runs if r.get("arm") == arm]
        runs_by_arm[arm] = {
            "ok": sum(1 for r in mine if r.get("status") == "ok"),
            "errors": sum(1 for r in mine if r.get("status") == "errors"),
            "failed": sum(1 for r in mine if r.get("status") == "failed"),
            "failures": [
                f"{r['id']}: {r.get('failure', '').splitlines()[0] if r.get('failure') else ''}"
                for r in mine
                if r.get("status") == "failed"
            ],
            "request_errors": [
                f"{r['id']} {q['name']}{_where(r)}: {q['error']}"
                for r in mine
                for q in r.get("requests", [])
                if q.get("error")
            ],
            "serialised": [r["id"] for r in mine if serialised(r)],
            "missed": [
                f"{r['id']}: {r.get('missed_join') or 'the joiners did not arrive while the streams decode'}"
                for r in mine
                if r.get("status") == MISSED
            ],
            "client_stalls": [
                f"{r['id']}: {w}" for r in mine for w in r.get("warnings") or [] if str(w).startswith("client stall:")
            ],
            "arm_failed": arm in failed_arms,
        }
    return {
        "failed_arms": sorted(failed_arms),
        "name": scenario["name"],
        "description": scenario.get("description", ""),
        "scale": scenario.get("scale", 1.0),
        "metrics": metrics,
        "runs": runs_by_arm,
    }


def serialised(run: dict[str, Any]) -> bool:
    return any(str(w).startswith("serialised:") for w in run.get("warnings") or [])


def measured_lengths(scenario: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, str]:
    """Per joiner, its prompt length as the servers counted it (usage), where one was reported and it is not
    the length asked for: "4096 tokens", or "2000-2011 tokens" when arms or rounds differ."""
    out = {}
    for spec in scenario["requests"]:
        counts = sorted(
            {
                q["measured_prompt_tokens"]
                for r in runs
                for q in r.get("requests") or []
                if q.get("name") == spec["name"] and isinstance(q.get("measured_prompt_tokens"), int)
            }
        )
        if counts and counts != [spec["prompt_tokens"]]:  # the asked length is the label's own wording
            out[spec["name"]] = (
                f"{counts[0]} tokens" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} tokens"
            ) + " as the server counted"
    return out


def _where(run: dict[str, Any]) -> str:
    return f" (@{run['url']})" if run.get("url") and not run.get("command") else ""
