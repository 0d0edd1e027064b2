"""Plots: each run's token timeline, one row per request, from the bench directory's JSON alone.

Every token is a tick at its arrival; a gap over the pause threshold is a red bar (grey before the
anchor, where the streams' own reads are setup, not measured); a joiner's read (sent to first token) is
shaded across the whole figure; a dashed line marks the anchor. Per scenario and round, one figure stacks the arms'
timelines on a shared time axis, which is the picture a PR shows. matplotlib with the Agg backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .metrics import compute_metrics, pauses_over  # noqa: E402
from .results import ResultsDir  # noqa: E402

_JOINER_COLOURS = ("#f4a261", "#2a9d8f", "#8d99ae", "#e9c46a", "#a8dadc")


def _session_rows(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agent sessions drawn one row each (every turn's tokens), a joining session as a joiner whose read is its
    first turn's; the gaps between turns include the agent's think time. Other runs' requests as they are."""
    if not any(r["role"] == "session" for r in requests):
        return requests
    rows: dict[str, dict[str, Any]] = {}
    for r in requests:
        row = rows.setdefault(
            r.get("session") or r["name"],
            {
                "name": r.get("session") or r["name"],
                "role": "joiner" if r.get("joined") else "stream",
                "sent_at": r.get("sent_at"),
                "first_token_at": r.get("first_token_at"),
                "token_times": [],
                "ended_by": "finished",
            },
        )
        row["token_times"] = sorted(row["token_times"] + list(r.get("token_times") or []))
        row["ended_at"], row["error"] = r.get("ended_at"), row.get("error") or r.get("error")
    return list(rows.values())


def draw_run(ax: Any, run: dict[str, Any], threshold_s: float) -> None:
    """One run's timeline on `ax`; x in the scenario's seconds (wall seconds x time_scale)."""
    scale = float(run.get("time_scale") or 1.0)
    requests = _session_rows(run.get("requests") or [])
    rows = [r for r in requests if r["role"] == "stream"] + [r for r in requests if r["role"] == "joiner"]
    anchor = run.get("anchor_at") if any(r["role"] == "stream" for r in requests) else None
    if anchor is not None:
        ax.axvline(anchor * scale, color="#6c757d", ls="--", lw=0.8, label="measuring starts (streams decoding)")
    colour = {}
    for i, joiner in enumerate(r for r in rows if r["role"] == "joiner"):
        colour[joiner["name"]] = _JOINER_COLOURS[i % len(_JOINER_COLOURS)]
        start, first = joiner.get("sent_at"), joiner.get("first_token_at") or joiner.get("ended_at")
        if start is not None and first is not None:
            ax.axvspan(
                start * scale,
                first * scale,
                color=colour[joiner["name"]],
                alpha=0.18,
                lw=0,
                label=f"{joiner['name']} read (sent → first token)",
            )
    for y, req in enumerate(rows):
        times = [t * scale for t in req.get("token_times") or []]
        if times:
            ax.plot(times, [y] * len(times), "|", ms=7, mew=0.8, color=colour.get(req["name"], "#264653"))
        measured = pauses_over(req, threshold_s, scale, since=anchor)
        for a, b in pauses_over(req, threshold_s, scale):
            # pauses before the anchor (the streams' own reads) are setup: grey, not counted
            colour_pause = "#d62828" if (a, b) in measured else "#adb5bd"
            ax.plot([a * scale, b * scale], [y, y], "-", lw=3.5, color=colour_pause, alpha=0.75, solid_capstyle="butt")
        if req.get("error"):
            ax.plot([(req.get("ended_at") or 0) * scale], [y], "x", ms=9, color="#d62828")
    ax.set_yticks(range(len(rows)), [r["name"] for r in rows], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    m = compute_metrics(run, threshold_s) if run.get("status") != "failed" else {}
    facts = [f"{run['arm']}", f"status {run.get('status')}"]
    if m.get("longest_pause_s") is not None:
        facts.append(f"longest pause {m['longest_pause_s']:.3g} s")
    if m.get("token_rate") is not None:
        facts.append(f"{m['token_rate']:.3g} tok/s")
    ax.set_title(" · ".join(facts), fontsize=9, loc="left")


def _finish(fig: Any, axes: list[Any], run: dict[str, Any], threshold_s: float, path: Path) -> Path:
    unit = "s" if float(run.get("time_scale") or 1.0) == 1.0 else "modelled s"
    axes[-1].set_xlabel(f"time since the run's start ({unit}); red: gaps over {threshold_s:g} s")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0.03 if handles else 0, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(run: dict[str, Any], path: Path, threshold_s: float) -> Path:
    rows = max(1, len(run.get("requests") or []))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.35 * rows))
    draw_run(ax, run, threshold_s)
    fig.suptitle(run["id"], fontsize=10)
    return _finish(fig, [ax], run, threshold_s, path)


def plot_round(runs: list[dict[str, Any]], path: Path, threshold_s: float) -> Path:
    """One round of one scenario: the arms stacked, same time axis."""
    rows = max(1, max(len(r.get("requests") or []) for r in runs))
    fig, axes = plt.subplots(
        len(runs), 1, sharex=True, squeeze=False, figsize=(11, 0.8 + len(runs) * (0.9 + 0.35 * rows))
    )
    axes = [a for row in axes for a in row]
    for ax, run in zip(axes, runs):
        draw_run(ax, run, threshold_s)
    fig.suptitle(f"{runs[0]['scenario']}, round {runs[0]['round']}", fontsize=10)
    return _finish(fig, axes, runs[0], threshold_s, path)


def plot_dir(
    results: ResultsDir, out_dir: Path | None = None, *, threshold_s: float | None = None, only: str | None = None
) -> list[Path]:
    """Every run's PNG plus one comparison PNG per scenario and round; `only` filters run ids by substring."""
    meta = results.read_meta()
    threshold = meta["config"].get("pause_threshold_s", 0.5) if threshold_s is None else threshold_s
    out_dir = out_dir or results.path / "plots"
    runs = [r for r in results.runs() if only is None or only in r["id"]]
    paths = [plot_run(r, out_dir / f"{r['id']}.png", threshold) for r in runs if r.get("requests")]
    arm_rank = {a["name"]: i for i, a in enumerate(meta["config"]["arms"])}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if r.get("requests"):
            groups.setdefault((r["scenario"], r["round"]), []).append(r)
    for (scenario, rnd), group in sorted(groups.items()):
        if len(group) > 1:
            group.sort(key=lambda r: arm_rank.get(r["arm"], len(arm_rank)))
            paths.append(plot_round(group, out_dir / f"{scenario}-r{rnd:02d}-arms.png", threshold))
    return paths
