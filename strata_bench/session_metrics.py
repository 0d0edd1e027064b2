"""Metrics of a run of agent sessions, from its raw JSON (sessions.py tags each turn with its session, its
turn index and whether its session joined mid-run).

- cached turns: every turn after a session's first (its prompt repeats one the server has read): TTFT
  median and p90; first turns: the starting sessions' first turns (their own context read cold);
- each joining session's first-turn TTFT (its cold read), under the session's label; with several joining
  sessions, one row of their median instead;
- cached prompt tokens per later turn, and the hit rate: the share of later turns' prompt tokens cached, where
  the server reports `usage.prompt_tokens_details.cached_tokens` (None where it does not);
- the other sessions' longest wait while a session joins: over the joining session's first read (its send to
  its first token), the longest gap in any other session's turn, counting its send to its first token and
  the gaps between its tokens (an agent thinking between turns is not waiting on the server; another joining
  session's first turn is its own cold read); with several joining sessions, one row of the longest over them;
- output token throughput over the run; turns per minute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Row = tuple[str, str, str, "str | None"]  # metrics.MetricSpec's fields: key, label, unit, better
DEFINITIONS = {  # one line per metric under a report (metrics.DEFINITIONS takes them in)
    "ttft_cached_p50_s": "cached turns: every session turn after its first (its prompt repeats one already read); "
    "TTFT = first token arrival minus send, median and p90 over the run's cached turns",
    "ttft_first_p50_s": "first turns: the starting agents' first turns (system prompt + own context, the context cold)",
    "join_wait_s": "the other agents' longest wait: over the joining agent's first read (send to first token), the "
    "longest gap in another agent's turn, its send to first token or between tokens (not think time)",
    "cached_tokens_p50": "cached prompt tokens: usage.prompt_tokens_details.cached_tokens of the later turns, where "
    "the server reports it",
    "cached_share": "hit rate: the later turns' cached prompt tokens (usage) over their prompt tokens, in %",
    "ttft_joined_p50_s": "joining agents (several): the median of their first turns' TTFT (own context cold)",
    "join_wait_max_s": "the other agents' longest wait, several joining: over any joining agent's first read, the "
    "longest gap in a working agent's turn, its send to first token or between tokens (not think "
    "time; another joiner's own first read is not a wait)",
    "turns_per_min": "turns answered per minute: finished turns over the run (first send to last token)",
}


def session_specs(scenario: dict[str, Any]) -> list[Row]:
    joining = [r for r in scenario["requests"] if r["role"] == "session" and r.get("after_turns") is not None]
    specs = [
        ("ttft_cached_p50_s", "cached turns: TTFT median", "s", "lower"),
        ("ttft_cached_p90_s", "cached turns: TTFT p90", "s", "lower"),
        ("ttft_first_p50_s", "first turns (own context cold): TTFT median", "s", "lower"),
    ]
    if len(joining) > 1:  # one row each would repeat one label: their median and their longest wait
        labels = {r.get("label") or r["name"] for r in joining}
        label = labels.pop() if len(labels) == 1 else "an agent"
        lengths = sorted(r["prompt_tokens"] for r in joining)
        specs.append(
            (
                "ttft_joined_p50_s",
                f"joining agents: first turn TTFT median ({len(joining)} joins, "
                f"{lengths[0]}-{lengths[-1]} own tokens cold)",
                "s",
                "lower",
            )
        )
        specs.append(
            (
                "join_wait_max_s",
                f"the other agents' longest wait while {label} joins (any of {len(joining)})",
                "s",
                "lower",
            )
        )
    for r in joining if len(joining) == 1 else ():
        label = r.get("label") or r["name"]
        specs.append(
            (f"ttft_s.{r['name']}", f"{label}: first turn TTFT ({r['prompt_tokens']} own tokens cold)", "s", "lower")
        )
        specs.append((f"join_wait_s.{r['name']}", f"the other agents' longest wait while {label} joins", "s", "lower"))
    specs += [
        ("cached_tokens_p50", "cached prompt tokens per later turn (usage), median", "tok", None),
        ("cached_share", "hit rate: later turns' prompt tokens served from the cache (usage), %", "", None),
        ("output_throughput", "output token throughput (whole run)", "tok/s", "higher"),
        ("turns_per_min", "turns answered per minute", "", "higher"),
    ]
    return specs


def session_metrics(requests: list[dict[str, Any]], scale: float) -> dict[str, float | None]:
    turns = [r for r in requests if r.get("role") == "session"]
    out: dict[str, float | None] = {}
    later = [r for r in turns if (r.get("turn") or 0) > 0]
    first = [r for r in turns if r.get("turn") == 0 and not r.get("joined")]
    for key, rows, q in (
        ("ttft_cached_p50_s", later, 50),
        ("ttft_cached_p90_s", later, 90),
        ("ttft_first_p50_s", first, 50),
    ):
        values = [v for v in (_ttft(r, scale) for r in rows) if v is not None]
        out[key] = float(np.percentile(values, q)) if values else None
    joins = [r for r in turns if r.get("joined") and r.get("turn") == 0]
    for join in joins:
        out[f"ttft_s.{join['session']}"] = _ttft(join, scale)
        # the agents already working: another joiner's first turn is a cold read of its own, not a wait
        others = [
            r for r in turns if r.get("session") != join["session"] and not (r.get("joined") and r.get("turn") == 0)
        ]
        out[f"join_wait_s.{join['session']}"] = _longest_wait(join, others, scale)
    if len(joins) > 1:
        firsts = [v for v in (out[f"ttft_s.{j['session']}"] for j in joins) if v is not None]
        waits = [v for v in (out[f"join_wait_s.{j['session']}"] for j in joins) if v is not None]
        out["ttft_joined_p50_s"] = float(np.median(firsts)) if firsts else None
        out["join_wait_max_s"] = max(waits) if waits else None
    cached = [r["cached_prompt_tokens"] for r in later if isinstance(r.get("cached_prompt_tokens"), int)]
    out["cached_tokens_p50"] = float(np.median(cached)) if cached else None
    counted = [r for r in later if isinstance(r.get("cached_prompt_tokens"), int)]
    prompt = sum(r.get("measured_prompt_tokens") or r.get("prompt_tokens") or 0 for r in counted)
    out["cached_share"] = 100.0 * sum(cached) / prompt if counted and prompt else None
    times = [t for r in turns for t in (r.get("token_times") or [])]
    sends = [r["sent_at"] for r in turns if r.get("sent_at") is not None]
    span = (max(times) - min(sends)) * scale if times and sends else 0.0
    out["output_throughput"] = len(times) / span if span > 0 else None
    answered = sum(1 for r in turns if r.get("ended_by") == "finished" and r.get("token_times"))
    out["turns_per_min"] = 60.0 * answered / span if span > 0 else None
    return out


def _ttft(request: dict[str, Any], scale: float) -> float | None:
    first, sent = request.get("first_token_at"), request.get("sent_at")
    return None if first is None or sent is None else (first - sent) * scale


def _longest_wait(join: dict[str, Any], others: list[dict[str, Any]], scale: float) -> float | None:
    start = join.get("sent_at")
    end = join.get("first_token_at") if join.get("first_token_at") is not None else join.get("ended_at")
    if start is None or end is None:
        return None
    longest = 0.0
    for turn in others:
        if turn.get("sent_at") is None:
            continue
        points = [turn["sent_at"], *(turn.get("token_times") or [])]
        if not turn.get("token_times") and turn.get("ended_at") is not None:
            points.append(turn["ended_at"])  # a turn that got nothing waited until it ended
        for before, after in zip(points, points[1:]):
            if after > start and before < end:
                longest = max(longest, after - before)
    return longest * scale
