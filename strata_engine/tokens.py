"""A sampled token: the one value that every layer passes along (the sampler makes it, executors deliver it,
the scheduler and the engine consume it). It lives at the bottom, importing nothing of the engine, so each
layer can name it without importing a higher one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SampledToken:
    token_id: int
    logprob: float | None = None  # log-softmax of the chosen token, when the request asked for logprobs
    top: tuple[tuple[int, float], ...] = ()  # top-k alternatives (token id, logprob), best first


class TokenSampler(Protocol):
    """What an executor needs to turn a request's row of logits into its next token (runtime/sampler.py)."""

    def sample(self, logits: Any) -> SampledToken:
        """logits: one row [V] of the framework's tensor type."""
