"""A request inside the engine: one object with explicit counters and a named phase.

The scheduler owns phase changes; the engine attaches its own per-request data in `payload` (the output
stream; only the engine reads it). What an executor needs is typed: prompt tokens in `prompt_ids`, the
request's `sampler` (torch executor), and for the simulator, which has no logits, how many top `logprobs` it
wants and its sampling `params` with the `seed` its draws use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..params import SamplingParams
from ..tokens import TokenSampler


class Phase(enum.Enum):
    WAITING = "waiting"  # queued, no slot
    READING = "reading"  # in a slot, prompt being read
    PARKED = "parked"  # gave way (BYIELD): keeps slot, KV and tokens_read; resumes later
    DECODING = "decoding"  # prompt read, generating
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    arrival: float = 0.0  # scheduler clock, seconds
    payload: Any = None
    slot: int | None = None
    phase: Phase = Phase.WAITING
    tokens_read: int = 0
    output_ids: list[int] = field(default_factory=list)
    cancelled: bool = False
    finish_reason: str | None = None  # "stop", "length", "cancelled", "error"
    error: str | None = None
    sampler: TokenSampler | None = None  # turns this request's logits row into its token (None: the simulator)
    logprobs: int | None = None  # top logprobs wanted per token (None = none), for executors without a sampler
    params: SamplingParams | None = None  # temperature, top_p, top_k for executors without a sampler (None: greedy)
    seed: int = 0  # the seed of those draws (the request's, else one the engine gave it)
    cache_salt: str | None = None  # prefixes are shared only between requests with the same salt (None: default)
    cached_tokens: int = 0  # prompt tokens taken from the prompt cache at admission, not read

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def tokens_generated(self) -> int:
        return len(self.output_ids)

    @property
    def context_tokens(self) -> int:
        """Tokens in the KV cache once the last sampled token is fed back: prompt + generated - 1."""
        return self.tokens_read + max(0, self.tokens_generated - 1)

    @property
    def next_position(self) -> int:
        """Position of the token the next decode step feeds (the last sampled one)."""
        return self.prompt_tokens + self.tokens_generated - 1
