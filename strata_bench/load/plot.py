"""Load plot: latency against output token throughput over a sweep, one line per arm, from the report's data.

Three panels share the x axis (output token throughput, median over rounds): TTFT, TPOT and request
latency, each at p50 (solid) and p99 (dashed); every point is labelled with its load (c4, rate2.5).
matplotlib with the Agg backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

_PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("latency_ms", "request latency (ms)"))


def _median(point: dict[str, Any], key: str, arm: str) -> float | None:
    for column in point["columns"]:
        if column["key"] == key:
            summary = column["summary"][arm]
            return None if summary is None else summary["median"]
    return None


def plot_sweep(report: dict[str, Any], path: Path) -> Path:
    """Write the latency-throughput figure of a load report (load_report.build_load_report) to `path`."""
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(5 * len(_PANELS), 4.2))
    for ax, (key, title) in zip(axes, _PANELS):
        for i, arm in enumerate(report["arms"]):
            colour = f"C{i}"
            for stat, style in (("p50", "-o"), ("p99", "--^")):
                xs, ys, labels = [], [], []
                for point in report["points"]:
                    x, y = _median(point, "output_throughput", arm), _median(point, f"{key}.{stat}", arm)
                    if x is not None and y is not None:
                        xs.append(x), ys.append(y), labels.append(point["label"])
                ax.plot(xs, ys, style, color=colour, label=f"{arm} {stat}", ms=4)
                if stat == "p50":
                    for x, y, label in zip(xs, ys, labels):
                        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel("output token throughput (tok/s)")
        ax.set_ylabel(title)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    w = report["workload"]
    fig.suptitle(
        f"{report['directory']}: input {w['input_len']}, output {w['output_len']} tokens, "
        f"{'keep-alive' if report['keepalive'] else 'one connection per request'}",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
