"""Timeline: when each run sent its joining requests and when their first token came, from the JSON alone.

The medians say how long a joiner waited; the timeline says why: whether a second prompt was sent before the
first one's read ended and so waited for it. One row per run (round, arm), one cell per non-stream request of
the scenario: `sent → first token (TTFT)`, seconds from the run's start (modelled seconds for a run made at a
time scale, as in the tables). A request that errored or never got a token says so in its cell.
"""

from __future__ import annotations

from typing import Any

from .results import ResultsDir


def request_timeline(results: ResultsDir, scenario: str) -> dict[str, Any]:
    """The scenario's joiners (its non-stream requests) and, per recorded run, each one's sent and first-token
    times. Raises ValueError naming the scenarios there are when `scenario` is not one of them."""
    config = results.read_meta()["config"]
    specs = {s["name"]: s for s in config["scenarios"]}
    if scenario not in specs:
        raise ValueError(f"scenario {scenario!r} is not in this bench; scenarios: {', '.join(specs)}")
    joiners = {q["name"]: q["prompt_tokens"] for q in specs[scenario]["requests"] if q.get("role") != "stream"}
    if not joiners:
        raise ValueError(f"scenario {scenario!r} has no requests beside its streams")
    rows = []
    for run in results.runs():
        if run.get("scenario") != scenario:
            continue
        by_name = {q.get("name"): q for q in run.get("requests") or []}
        scale = float(run.get("time_scale") or 1.0)
        rows.append(
            {
                "round": run.get("round"),
                "arm": run.get("arm"),
                "status": run.get("status"),
                "requests": {name: _times(by_name.get(name), scale) for name in joiners},
            }
        )
    return {"scenario": scenario, "joiners": joiners, "runs": rows}


def _times(request: dict[str, Any] | None, scale: float) -> dict[str, Any]:
    if request is None:
        return {"missing": "not sent"}
    if request.get("error"):
        return {"missing": f"error: {request['error']}"}
    sent, first = request.get("sent_at"), request.get("first_token_at")
    if sent is None or first is None:
        return {"missing": "no token"}
    return {"sent_s": sent * scale, "first_token_s": first * scale, "ttft_s": (first - sent) * scale}


def render_timeline_md(timeline: dict[str, Any]) -> str:
    joiners = timeline["joiners"]
    lines = [
        f"**{timeline['scenario']}**: per run, each joiner's sent → first token (TTFT), seconds from the run's start",
        "",
        "| round | arm | " + " | ".join(f"{name} ({tokens:,} tokens)" for name, tokens in joiners.items()) + " |",
        "|---:|---|" + "---|" * len(joiners),
    ]
    for row in timeline["runs"]:
        cells = [_cell(row["requests"][name]) for name in joiners]
        arm = row["arm"] if row["status"] == "ok" else f"{row['arm']} ({row['status']})"
        lines.append(f"| {row['round']} | {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(times: dict[str, Any]) -> str:
    if "missing" in times:
        return times["missing"]
    return f"{times['sent_s']:.3f} → {times['first_token_s']:.3f} ({times['ttft_s']:.3f})"
