"""Metrics of one run, computed from its raw JSON (per-token arrival times), never from live state.

Definitions (docs/BENCH.md). Stream figures count from the run's anchor (every stream decoding, plus
settle_s): the streams' own setup reads before it are not the join being measured.
- a stream's gaps: the time between consecutive tokens, plus, when it did not finish on its own (closed
  by the bench after the tail, an error), the open gap from its last token to its end;
- longest pause: the largest gap of any stream; total time paused: per stream the sum of gaps strictly
  over the threshold (a gap exactly at it does not count), mean over the streams;
- tokens meanwhile: stream tokens arriving after the first joiner's send, up to and including the last
  joiner's first token (or its end, if it failed);
- TTFT of each joiner; the joiners' span (two or more joiners): from the first joiner's send to the last
  joiner's first token, the time the engine took to read them all, whatever order it read them in;
- token rate: every token after the anchor over (last token - anchor);
- inter-token latency p50/p99/max over the streams' gaps between tokens;
  (token rate and latency only for scenarios with streams: otherwise a run is a few joiner tokens)
- engine events, when the server exposes them: read pieces, lead-ins, give-ways, stops (not the streams');
- the engine's peak RSS in MB (1e6 bytes), where the bench launched it and sampled its process tree.
Times in the JSON are wall seconds; a run made at `time_scale` T is reported in modelled seconds (x T).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .session_metrics import DEFINITIONS as SESSION_DEFINITIONS, session_metrics, session_specs

DEFAULT_PAUSE_THRESHOLD_S = 0.5
EVENT_COUNTS = (
    ("pieces", "PIECE", "read pieces"),
    ("lead_ins", "LEADIN", "lead-ins"),
    ("give_ways", "YIELDED", "give-ways"),
    ("stops", "BSTOP", "stopped reads"),
)


@dataclass(frozen=True)
class MetricSpec:
    key: str
    label: str
    unit: str  # "s", "ms", "tok", "tok/s", "MB", "" (a count)
    better: str | None  # "lower", "higher", or None for a descriptive count (engine events)


# One line per metric, printed under every report (the load runs' field metrics have their own: field_metrics.py).
DEFINITIONS = {
    "longest_pause_s": "longest pause of a stream: the largest gap between a stream's tokens after the anchor",
    "total_paused_s": "total time paused per stream: per stream the sum of its gaps over the threshold, mean over streams",
    "tokens_meanwhile": "tokens the streams got meanwhile: stream tokens from the first joiner's send to the last "
    "joiner's first token",
    "ttft_s": "TTFT: a joiner's first token arrival minus its send time",
    "joiners_span_s": "the joiners' span: from the first joiner's send to the last joiner's first token (every "
    "joiner read, in whatever order)",
    "token_rate": "stream token rate after the anchor: tokens arriving after every stream decodes (+ settle_s) over "
    "(last token - anchor); not throughput, which counts every token over the whole run",
    "output_throughput": "output token throughput: every token of every request over the run (first send to "
    "last token), AIPerf's and vLLM's output throughput",
    "itl_ms": "inter-token latency (pooled gaps): percentiles of every gap between the streams' tokens after the "
    "anchor, pooled (vLLM's ITL); not AIPerf's ITL, a per-request average",
    **SESSION_DEFINITIONS,
    "peak_rss_mb": "engine peak RSS: the largest sum of VmRSS over the launched engine's process tree (it and its "
    "children), sampled every 0.25 s from health to the run's end; only for engines the bench starts",
}


PEAK_RSS = MetricSpec("peak_rss_mb", "engine peak RSS (its process tree)", "MB", "lower")


def metric_specs(
    scenario: dict[str, Any], has_events: bool, measured: dict[str, str] | None = None, has_rss: bool = False
) -> list[MetricSpec]:
    """The report's rows for a scenario (its JSON dict), in the spec's order. `measured` names each
    joiner's prompt length as the servers counted it (e.g. "4096 tokens"), which the label then states;
    `has_rss`: some run sampled its engine's memory (a last row)."""
    requests = scenario["requests"]
    has_streams = any(r["role"] == "stream" for r in requests)
    specs: list[MetricSpec] = []
    rss = [PEAK_RSS] if has_rss else []
    if any(r["role"] == "session" for r in requests):  # agent sessions: their own rows (session_metrics.py)
        specs = [MetricSpec(*row) for row in session_specs(scenario)]
        return (
            specs + ([MetricSpec(key, label, "", None) for key, _, label in EVENT_COUNTS] if has_events else []) + rss
        )
    if has_streams:
        specs += [
            MetricSpec("longest_pause_s", "longest pause of a stream", "s", "lower"),
            MetricSpec("total_paused_s", "total time paused per stream", "s", "lower"),
            MetricSpec("tokens_meanwhile", "tokens the streams got meanwhile", "tok", "higher"),
        ]
    scaled = scenario.get("scale", 1.0) != 1.0
    for r in requests:
        if r["role"] == "joiner":
            # a scaled run keeps the full-size wording ("the 64K prompt") and says what it really sent
            size = f" ({r['prompt_tokens']} tokens at this scale)" if scaled else ""
            if measured and measured.get(r["name"]):
                size = f" ({measured[r['name']]})"
            specs.append(MetricSpec(f"ttft_s.{r['name']}", f"{r.get('label') or r['name']}{size}: TTFT", "s", "lower"))
    if sum(1 for r in requests if r["role"] == "joiner") > 1:
        specs.append(MetricSpec("joiners_span_s", "the joiners' span: first send to last first token", "s", "lower"))
    if has_streams:  # without streams a run is a few joiner tokens: no rate or latency worth a row
        specs += [
            MetricSpec("token_rate", "stream token rate after the anchor", "tok/s", "higher"),
            MetricSpec("output_throughput", "output token throughput (whole run)", "tok/s", "higher"),
            MetricSpec("itl_p50_ms", "inter-token latency p50 (pooled gaps)", "ms", "lower"),
            MetricSpec("itl_p99_ms", "inter-token latency p99 (pooled gaps)", "ms", "lower"),
            MetricSpec("itl_max_ms", "inter-token latency max (pooled gaps)", "ms", "lower"),
        ]
    if has_events:
        specs += [MetricSpec(key, label, "", None) for key, _, label in EVENT_COUNTS]
    return specs + rss


def _spans(request: dict[str, Any], since: float | None, open_end: bool) -> list[tuple[float, float]]:
    """(earlier, later) arrival times of consecutive tokens, in wall seconds, whose later end is after
    `since` (the run's anchor: the streams' own setup reads are not the join being measured); with
    `open_end`, plus the gap from the last token to the request's end when it did not finish on its own."""
    times = list(request.get("token_times") or [])
    ended = request.get("ended_at")
    if open_end and times and ended is not None and request.get("ended_by") != "finished" and ended > times[-1]:
        times.append(ended)
    spans = list(zip(times, times[1:]))
    return spans if since is None else [(a, b) for a, b in spans if b > since]


def token_gaps(request: dict[str, Any], scale: float = 1.0, since: float | None = None) -> list[float]:
    """Gaps between consecutive tokens (k tokens of one event give k-1 zero gaps)."""
    return [(b - a) * scale for a, b in _spans(request, since, open_end=False)]


def pause_gaps(request: dict[str, Any], scale: float = 1.0, since: float | None = None) -> list[float]:
    """token_gaps plus the open gap to the request's end when it did not finish on its own."""
    return [(b - a) * scale for a, b in _spans(request, since, open_end=True)]


def pauses_over(
    request: dict[str, Any], threshold_s: float, scale: float = 1.0, since: float | None = None
) -> list[tuple[float, float]]:
    """(start, end) in the run's wall seconds of every gap over the threshold: what the plot marks."""
    return [(a, b) for a, b in _spans(request, since, open_end=True) if (b - a) * scale > threshold_s]


def ttft(request: dict[str, Any], scale: float = 1.0) -> float | None:
    first, sent = request.get("first_token_at"), request.get("sent_at")
    if first is None or sent is None:
        return None
    return (first - sent) * scale


def compute_metrics(run: dict[str, Any], threshold_s: float = DEFAULT_PAUSE_THRESHOLD_S) -> dict[str, float | None]:
    """Every metric of one run; None where it cannot be measured (a failed joiner, no streams)."""
    if threshold_s < 0:
        raise ValueError(f"pause threshold must be >= 0, got {threshold_s}")
    scale = float(run.get("time_scale") or 1.0)
    requests = run.get("requests") or []
    streams = [r for r in requests if r["role"] == "stream"]
    joiners = [r for r in requests if r["role"] == "joiner"]
    out: dict[str, float | None] = {}
    if any(r["role"] == "session" for r in requests):
        out.update(session_metrics(requests, scale))

    since = run.get("anchor_at") if streams else None
    if streams:
        per_stream = [pause_gaps(s, scale, since) for s in streams if s.get("token_times")]
        out["longest_pause_s"] = max((max(g) for g in per_stream if g), default=None)
        totals = [sum(x for x in g if x > threshold_s) for g in per_stream]
        out["total_paused_s"] = float(np.mean(totals)) if totals else None
        out["tokens_meanwhile"] = _tokens_meanwhile(streams, joiners)
    for j in joiners:
        out[f"ttft_s.{j['name']}"] = ttft(j, scale)
    if len(joiners) > 1:
        out["joiners_span_s"] = _joiners_span(joiners, scale)

    if streams:
        out["token_rate"] = _token_rate(requests, scale, since)
        out["output_throughput"] = _token_rate(requests, scale, None)
        gaps = [g for r in streams for g in token_gaps(r, scale, since)]
        for key, q in (("itl_p50_ms", 50), ("itl_p99_ms", 99), ("itl_max_ms", 100)):
            out[key] = float(np.percentile(gaps, q)) * 1000.0 if gaps else None

    if run.get("peak_rss_bytes") is not None:
        out["peak_rss_mb"] = run["peak_rss_bytes"] / 1e6
    events = run.get("engine_events")
    if events is not None:
        # the streams' own reads are setup; count what the joiners' reads did (ids: <run id>-<request>)
        setup = {f"{run.get('id')}-{s['name']}" for s in streams}
        counted = [e for e in events if e.get("request_id") not in setup]
        for key, kind, _ in EVENT_COUNTS:
            out[key] = float(sum(1 for e in counted if e.get("kind") == kind))
    return out


def _tokens_meanwhile(streams: list[dict[str, Any]], joiners: list[dict[str, Any]]) -> float | None:
    sends = [j["sent_at"] for j in joiners if j.get("sent_at") is not None]
    ends = [j.get("first_token_at") if j.get("first_token_at") is not None else j.get("ended_at") for j in joiners]
    ends = [e for e in ends if e is not None]
    if not sends or not ends:
        return None
    start, end = min(sends), max(ends)
    return float(sum(1 for s in streams for t in (s.get("token_times") or []) if start < t <= end))


def _joiners_span(joiners: list[dict[str, Any]], scale: float) -> float | None:
    """First send to last first token; None where a joiner got no token (the span would not hold its read)."""
    sends, firsts = [j.get("sent_at") for j in joiners], [j.get("first_token_at") for j in joiners]
    if None in sends or None in firsts:
        return None
    return (max(firsts) - min(sends)) * scale


def _token_rate(requests: list[dict[str, Any]], scale: float, since: float | None) -> float | None:
    """Tokens over (last token - start), start = the anchor, or the first send without one."""
    times = [t for r in requests for t in (r.get("token_times") or []) if since is None or t > since]
    sends = [r["sent_at"] for r in requests if r.get("sent_at") is not None]
    if not times or (since is None and not sends):
        return None
    span = (max(times) - (since if since is not None else min(sends))) * scale
    return len(times) / span if span > 0 else None
