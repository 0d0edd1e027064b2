"""One streamed completion as received: every token's id, arrival time, logprob and top candidates.

`StreamResult` is filled while the request streams (so a cancelled or failed request keeps what it got)
by `wire.apply_event`, which reads one parsed SSE payload in either wire form: OpenAI (`choices` with
`token_ids`, else logprobs `tokens`, else 1 for non-empty text) or llama.cpp's native `/completion`
(`tokens`, `completion_probabilities`, `stop`/`stop_type`). Times are `time.perf_counter()` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    name: str
    role: str = ""
    request_id: str = ""  # the readable id (run and request); the server may know it by another form
    prompt_tokens: int = 0  # as planned; `measured_prompt_tokens` is what the server counted
    prompt_sha256: str = ""
    max_tokens: int | None = None
    sent_at: float | None = None
    times: list[float] = field(default_factory=list)  # one arrival stamp per token
    token_ids: list[int] = field(default_factory=list)
    ids_given: bool | None = None  # the server returned token ids (None: decided from token_ids)
    logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    token_texts: list[str | None] = field(default_factory=list)  # each chosen token as top_logprobs keys it
    text: str = ""
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    engine_id: str | None = None  # the completion id the server gave
    ended_at: float | None = None
    ended_by: str | None = None  # "finished" | "cancelled" | "error"
    cancelled: bool = False
    error: str | None = None
    http_status: int | None = None
    usage: dict[str, Any] | None = None
    events: int = 0
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.ids_given is None:
            self.ids_given = bool(self.token_ids)

    @property
    def first_token_at(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def done_at(self) -> float | None:
        return self.ended_at

    @property
    def measured_prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None

    @property
    def cached_prompt_tokens(self) -> int | None:
        """Prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens),
        where it reports them (Strata always; vLLM with --enable-prompt-tokens-details)."""
        details = (self.usage or {}).get("prompt_tokens_details")
        value = details.get("cached_tokens") if isinstance(details, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def tokens_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.times if start <= t <= end)

    def add_tokens(
        self,
        count: int,
        at: float,
        ids: list[int] | None,
        logprobs: list[float | None] | None = None,
        tops: list[dict[str, float] | None] | None = None,
        texts: list[str | None] | None = None,
    ) -> None:
        if count <= 0:
            return
        self.times.extend([at] * count)
        if ids is not None:
            self.ids_given = True
            self.token_ids.extend(ids)
        if logprobs is not None or tops is not None:
            for i in range(count):
                self.logprobs.append(logprobs[i] if logprobs and i < len(logprobs) else None)
                self.top_logprobs.append(tops[i] if tops and i < len(tops) else None)
                self.token_texts.append(texts[i] if texts and i < len(texts) else None)

    def check_end(self) -> None:
        """A stream that ends without a finish_reason ended early: an error, never a finish."""
        if self.error is None and not self.cancelled and self.finish_reason is None and self.http_status == 200:
            asked = f" of {self.max_tokens} asked" if self.max_tokens else ""
            self.error = (
                f"the stream ended without a finish_reason after {len(self.times)} tokens{asked} "
                "(the server stopped it early)"
            )

    def to_dict(self, origin: float) -> dict[str, Any]:
        """JSON form with times in seconds since `origin` (the run's start), to the microsecond."""

        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin, 6)

        return {
            "name": self.name,
            "role": self.role,
            "request_id": self.request_id,
            "prompt_tokens": self.prompt_tokens,
            "measured_prompt_tokens": self.measured_prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "prompt_sha256": self.prompt_sha256,
            "max_tokens": self.max_tokens,
            "sent_at": rel(self.sent_at),
            "first_token_at": rel(self.first_token_at),
            "ended_at": rel(self.ended_at),
            "ended_by": self.ended_by,
            "error": self.error,
            "http_status": self.http_status,
            "finish_reason": self.finish_reason,
            "tokens": len(self.times),
            "events": self.events,
            "usage": self.usage,
            "warnings": self.warnings,
            "text": self.text,
            "token_ids": self.token_ids if self.ids_given else None,
            "token_times": [round(t - origin, 6) for t in self.times],
        }
