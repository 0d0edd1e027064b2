"""Sampling parameters of one request.

Validated on construction so a bad value is a clear error for that request only. Greedy is
temperature 0; seeded sampling uses a per-request generator so the same seed gives the same text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import RequestError


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    logprobs: int | None = None  # None = off; k >= 0 = chosen token's logprob plus top-k alternatives
    cache_salt: str | None = None  # vLLM's: prompt-cache prefixes are shared only within one salt (None: the default)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise RequestError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}", "max_tokens")
        if not (0.0 <= float(self.temperature) <= 100.0):
            raise RequestError(f"temperature must be in [0, 100], got {self.temperature!r}", "temperature")
        if not (0.0 < float(self.top_p) <= 1.0):
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise RequestError(f"top_k must be an integer >= 0, got {self.top_k!r}", "top_k")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            raise RequestError(f"logprobs must be an integer in [0, 20], got {self.logprobs!r}", "logprobs")
        if self.cache_salt is not None and (not isinstance(self.cache_salt, str) or not self.cache_salt):
            raise RequestError("cache_salt must be a non-empty string if given", "cache_salt")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise RequestError("stop must be non-empty strings", "stop")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
