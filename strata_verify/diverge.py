"""Where two greedy answers part: the first differing token index, both tokens, both logprobs, top-2 margins.

An answer is anything with `token_ids`, `logprobs` and `top_logprobs` lists (a `client.Completion`,
or a manifest entry loaded back). A difference whose top-2 margin is under `near_tie` on either side
is named a near-tie: two candidates so close that a rounding change between batch shapes flips them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from strata_bench.engines.compare import first_difference  # the one rule, shared with the bench

NEAR_TIE = 0.01  # nats between the top two candidates


def top2_margin(top: dict[str, float] | None) -> float | None:
    """Top-1 minus top-2 logprob of one position's `top_logprobs`, or None with fewer than two."""
    if not top or len(top) < 2:
        return None
    best, second = sorted((float(v) for v in top.values()), reverse=True)[:2]
    return best - second


def _at(values: Sequence[Any], index: int) -> Any:
    return values[index] if 0 <= index < len(values) else None


@dataclass(frozen=True)
class Divergence:
    """Two answers differ at `index`; `left_*`/`right_*` are each side's facts at that index."""

    left_name: str
    right_name: str
    index: int
    left_token: int | None
    right_token: int | None
    left_logprob: float | None
    right_logprob: float | None
    left_margin: float | None
    right_margin: float | None
    left_length: int
    right_length: int
    near_tie_threshold: float = NEAR_TIE

    @property
    def near_tie(self) -> bool:
        margins = [m for m in (self.left_margin, self.right_margin) if m is not None]
        return bool(margins) and min(margins) < self.near_tie_threshold

    @property
    def length_only(self) -> bool:
        return self.left_token is None or self.right_token is None

    def describe(self) -> str:
        if self.length_only:
            return (f"{self.left_name} has {self.left_length} tokens, {self.right_name} {self.right_length}; "
                    f"equal over the first {self.index}")
        text = (f"first differing token at index {self.index}: {self.left_name} {self.left_token} "
                f"({_side(self.left_logprob, self.left_margin)}) vs {self.right_name} {self.right_token} "
                f"({_side(self.right_logprob, self.right_margin)})")
        if self.near_tie:
            text += (f"; near-tie: top-2 margin under {self.near_tie_threshold:g}, so a rounding difference between "
                     "batch shapes can flip the greedy choice")
        elif self.left_margin is not None or self.right_margin is not None:
            text += "; not a near-tie"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "left": self.left_name, "right": self.right_name,
                "left_token": self.left_token, "right_token": self.right_token,
                "left_logprob": self.left_logprob, "right_logprob": self.right_logprob,
                "left_margin": self.left_margin, "right_margin": self.right_margin,
                "left_length": self.left_length, "right_length": self.right_length, "near_tie": self.near_tie}


def _side(logprob: float | None, margin: float | None) -> str:
    lp = "logprob n/a" if logprob is None else f"logprob {logprob:.6f}"
    return lp if margin is None else f"{lp}, top-2 margin {margin:.6f}"


def compare_answers(*, left_name: str, left: Any, right_name: str, right: Any,
                    near_tie: float = NEAR_TIE) -> Divergence | None:
    """None when both answers have the same token ids; else where and how they differ."""
    index = first_difference(left.token_ids, right.token_ids)
    if index is None:
        return None
    return Divergence(
        left_name=left_name, right_name=right_name, index=index,
        left_token=_at(left.token_ids, index), right_token=_at(right.token_ids, index),
        left_logprob=_at(left.logprobs, index), right_logprob=_at(right.logprobs, index),
        left_margin=top2_margin(_at(left.top_logprobs, index)), right_margin=top2_margin(_at(right.top_logprobs, index)),
        left_length=len(left.token_ids), right_length=len(right.token_ids), near_tie_threshold=near_tie,
    )


@dataclass(frozen=True)
class LogprobDelta:
    """Largest |left - right| chosen-token logprob over the positions where both chose the same token."""

    largest: float | None  # None when no position has logprobs on both sides
    index: int | None
    compared: int  # positions compared
    differing: int  # positions whose logprobs are not bitwise equal

    @property
    def bitwise_equal(self) -> bool:
        return self.compared > 0 and self.differing == 0


def logprob_delta(left: Any, right: Any) -> LogprobDelta:
    largest, where, compared, differing = None, None, 0, 0
    limit = first_difference(left.token_ids, right.token_ids)
    limit = min(len(left.token_ids), len(right.token_ids)) if limit is None else limit
    for index in range(limit):
        a, b = _at(left.logprobs, index), _at(right.logprobs, index)
        if a is None or b is None:
            continue
        compared += 1
        delta = abs(float(a) - float(b))
        if not (a == b or (math.isnan(a) and math.isnan(b))):
            differing += 1
        if largest is None or delta > largest:
            largest, where = delta, index
    return LogprobDelta(largest=largest, index=where, compared=compared, differing=differing)
