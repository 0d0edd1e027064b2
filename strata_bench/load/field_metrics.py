"""Load-run metrics named and defined as the field defines them (AIPerf, `vllm bench serve`), from raw JSON.

Input: a load run's request records (times in seconds since the run's start: `sent_at`, `first_token_at`,
`ended_at`, `chunk_times` = arrival of each token-carrying event, `output_tokens`). Output: plain numbers.
Every definition is one line in DEFINITIONS, and every report prints the ones it shows. A request counts
as completed when it finished on its own with no error and at least one token; the others are counted as
failed and left out of every latency figure, as AIPerf and vLLM do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)

DEFINITIONS: dict[str, str] = {
    "ttft_ms": "TTFT: first token's arrival minus the request's send time (connect included), per request",
    "tpot_ms": "TPOT: (request latency - TTFT) / (output tokens - 1), per request with 2+ tokens; "
    "AIPerf calls this inter-token latency (ITL)",
    "itl_ms": "ITL, pooled per gap: every gap between consecutive token-carrying events of a request, all "
    "requests pooled (vLLM's ITL, AIPerf's inter-chunk latency); one event with k tokens is one gap",
    "latency_ms": "request latency: the end of the stream ([DONE]) minus the send time, per request (vLLM E2EL)",
    "output_tokens": "output tokens per request: tokens counted in the stream's events",
    "input_tokens": "input tokens per request: the server's usage.prompt_tokens where given, else the length sent",
    "duration_s": "run duration: last completed request's end minus the first request's send",
    "request_throughput": "request throughput: completed requests / run duration",
    "output_throughput": "output token throughput: all output tokens of completed requests / run duration",
    "goodput": "goodput: completed requests meeting every SLO given (TTFT, TPOT, latency) / run duration",
    "per_user_tps": "output tokens per second per user: 1 / TPOT, per request",
}


@dataclass(frozen=True)
class SLO:
    """Service-level objectives for goodput, in milliseconds; None means no limit on that figure."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    latency_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "latency_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"SLO {name} must be > 0 ms, got {value}")

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.latency_ms))

    def met_by(self, request: "RequestTimes") -> bool:
        checks = ((self.ttft_ms, request.ttft_s), (self.tpot_ms, request.tpot_s), (self.latency_ms, request.latency_s))
        for limit, value in checks:
            if limit is None:
                continue
            if value is None or value * 1000.0 > limit:
                return False
        return True

    def describe(self) -> str:
        parts = [
            f"{label} <= {v:g} ms"
            for label, v in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("latency", self.latency_ms))
            if v is not None
        ]
        return ", ".join(parts) or "none"

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "latency_ms": self.latency_ms}


@dataclass(frozen=True)
class RequestTimes:
    """One completed request's field figures, in seconds."""

    ttft_s: float
    latency_s: float
    output_tokens: int
    gaps_s: tuple[float, ...]  # between consecutive token-carrying events

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def completed(request: dict[str, Any]) -> bool:
    return (
        request.get("ended_by") == "finished"
        and not request.get("error")
        and request.get("first_token_at") is not None
        and (request.get("output_tokens") or 0) > 0
    )


def input_tokens(request: dict[str, Any]) -> int:
    """The server's count (usage.prompt_tokens) where it gave one, else the length drawn: text prompts are
    words, about one token each on common tokenizers but several on a byte-level one."""
    served = (request.get("usage") or {}).get("prompt_tokens")
    return int(served) if isinstance(served, int) else int(request.get("input_tokens") or 0)


def request_times(request: dict[str, Any]) -> RequestTimes:
    """The figures of one completed request record (see `completed`)."""
    if not completed(request):
        raise ValueError(
            f"request {request.get('name')!r} did not complete: {request.get('error') or request.get('ended_by')}"
        )
    sent, first, ended = request["sent_at"], request["first_token_at"], request["ended_at"]
    chunks = list(request.get("chunk_times") or [])
    return RequestTimes(
        ttft_s=first - sent,
        latency_s=ended - sent,
        output_tokens=int(request["output_tokens"]),
        gaps_s=tuple(b - a for a, b in zip(chunks, chunks[1:])),
    )


def distribution(values_s: Sequence[float], scale: float = 1000.0) -> dict[str, float] | None:
    """mean, min, max and PERCENTILES (numpy's linear interpolation, as vLLM and AIPerf use) of values x scale."""
    if not values_s:
        return None
    data = np.asarray(values_s, dtype=float) * scale
    out = {
        "n": float(data.size),
        "mean": float(data.mean()),
        "min": float(data.min()),
        "max": float(data.max()),
        "std": float(data.std()),
    }
    for q in PERCENTILES:
        out[f"p{q}"] = float(np.percentile(data, q))
    return out


def run_metrics(requests: Sequence[dict[str, Any]], slo: SLO | None = None) -> dict[str, Any]:
    """Every field figure of one load run (see DEFINITIONS). Distributions are in ms, rates per second."""
    done = [r for r in requests if completed(r)]
    times = [request_times(r) for r in done]
    out: dict[str, Any] = {
        "completed": len(done),
        "failed": len(requests) - len(done),
        "input_tokens": int(sum(input_tokens(r) for r in done)),
        "output_tokens_total": int(sum(t.output_tokens for t in times)),
    }
    sends = [r["sent_at"] for r in requests if r.get("sent_at") is not None]
    ends = [r["ended_at"] for r in done]
    duration = (max(ends) - min(sends)) if ends and sends else None
    out["duration_s"] = duration
    rate = (lambda count: count / duration) if duration and duration > 0 else (lambda count: None)
    out["request_throughput"] = rate(len(done))
    out["output_throughput"] = rate(out["output_tokens_total"])
    out["ttft_ms"] = distribution([t.ttft_s for t in times])
    tpots = [t.tpot_s for t in times if t.tpot_s is not None]
    out["tpot_ms"] = distribution(tpots)
    out["itl_ms"] = distribution([g for t in times for g in t.gaps_s])
    out["latency_ms"] = distribution([t.latency_s for t in times])
    out["output_tokens"] = distribution([float(t.output_tokens) for t in times], scale=1.0)
    out["input_tokens_per_request"] = distribution([float(input_tokens(r)) for r in done], scale=1.0)
    out["per_user_tps"] = distribution([1.0 / v for v in tpots if v > 0], scale=1.0)
    if slo is not None and slo.any:
        good = sum(1 for t in times if slo.met_by(t))
        out["goodput"] = rate(good)
        out["good_requests"] = good
        out["slo"] = slo.to_dict()
    return out
