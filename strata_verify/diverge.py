"""Where two greedy answers part, and what kind of difference it is: near-tie, wrong token, or clear.

An answer is anything with `token_ids`, `logprobs` and `top_logprobs` lists (a `client.Completion`,
or a manifest entry loaded back), optionally `token_texts` (the chosen tokens' text, which keys
`top_logprobs`) or `top_ids` (ranked `[token_id, logprob]` pairs, as an independent reference stores).
A difference is a **near-tie** only when, on both sides, the chosen token is that side's own top-1
and its top-2 margin is under `near_tie`; a side whose chosen token is not its own top-1 (or whose
chosen logprob disagrees with its top-1's) is a **wrong token**, whatever the margins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from strata_bench.engines.compare import first_difference  # the one rule, shared with the bench

NEAR_TIE = 0.01  # nats between the top two candidates
SAME_LOGPROB = 1e-5  # a chosen token's logprob and its top-1 entry's agree within this (servers round)

NEAR, WRONG, CLEAR, UNPROVEN, LENGTH = "near-tie", "wrong token", "clear", "unproven", "length"


def _at(values: Sequence[Any] | None, index: int) -> Any:
    return values[index] if values is not None and 0 <= index < len(values) else None


@dataclass(frozen=True)
class Side:
    """One answer's facts at the differing index. `top` is ranked best first, ties in the server's
    order (a server that appends the chosen token to its top-N puts it last); keys are texts or ids."""

    name: str
    token: int | None
    key: Any  # the chosen token as `top` names it (its text, or its id); None when unknown
    logprob: float | None
    top: tuple[tuple[Any, float], ...]
    length: int

    @property
    def top1_verdict(self) -> tuple[bool | None, str]:
        """(is the chosen token this side's own top-1?, why). None: the facts to tell are missing."""
        if not self.top:
            return None, f"{self.name} gave no top logprobs"
        best_key, best_lp = self.top[0]
        if self.logprob is not None and self.logprob < best_lp - SAME_LOGPROB:
            return False, (
                f"{self.name}'s chosen token has logprob {self.logprob:.6f}, below its own top-1 "
                f"{best_key!r} at {best_lp:.6f}: it is not its argmax"
            )
        if self.key is None:
            return None, f"{self.name} did not say which top-logprobs entry is its chosen token"
        if self.key != best_key:
            return False, (
                f"{self.name}'s chosen token {self.key!r} is not its own top-1 {best_key!r} "
                f"(logprob {best_lp:.6f}): a token changed after it was chosen, or logprobs of another token"
            )
        if self.logprob is not None and abs(self.logprob - best_lp) > SAME_LOGPROB:
            return False, (
                f"{self.name}'s chosen-token logprob {self.logprob:.6f} disagrees with its own top-1 "
                f"entry {best_lp:.6f} for the same token"
            )
        return True, f"{self.name} chose its own top-1"

    @property
    def candidates(self) -> tuple[tuple[Any, float], ...]:
        """The side's own ranked candidates: a chosen token that is not ranked first was added to
        them (by a server that lists the chosen token too), so it is left out."""
        if self.key is None or not self.top or self.top[0][0] == self.key:
            return self.top
        return tuple(entry for entry in self.top if entry[0] != self.key)

    @property
    def margin(self) -> float | None:
        """Top-1 minus top-2 logprob of the side's own candidates, or None with fewer than two."""
        top = self.candidates
        return top[0][1] - top[1][1] if len(top) >= 2 else None

    @property
    def runner_up(self) -> Any:
        return self.candidates[1][0] if len(self.candidates) >= 2 else None

    def describe(self) -> str:
        lp = "logprob n/a" if self.logprob is None else f"logprob {self.logprob:.6f}"
        margin = "" if self.margin is None else f", top-2 margin {self.margin:.6f}"
        text = "" if self.key is None or isinstance(self.key, int) else f" {self.key!r}"
        return f"{self.name} {self.token}{text} ({lp}{margin})"


def _side(name: str, answer: Any, index: int) -> Side:
    token = _at(answer.token_ids, index)
    logprob = _at(getattr(answer, "logprobs", None), index)
    ranked_ids = _at(getattr(answer, "top_ids", None), index)
    if ranked_ids:
        top = tuple((int(t), float(lp)) for t, lp in ranked_ids)
        key = token
    else:
        entries = _at(getattr(answer, "top_logprobs", None), index) or {}
        # a stable sort keeps the server's order among equal logprobs: its own top-1 comes first
        top = tuple(sorted(((k, float(v)) for k, v in entries.items()), key=lambda kv: -kv[1]))
        key = _at(getattr(answer, "token_texts", None), index)
    return Side(name, token, key, None if logprob is None else float(logprob), top, len(answer.token_ids))


@dataclass(frozen=True)
class Divergence:
    """Two answers differ at `index`; `left`/`right` are each side's facts there."""

    index: int
    left: Side
    right: Side
    near_tie_threshold: float = NEAR_TIE

    @property
    def length_only(self) -> bool:
        return self.left.token is None or self.right.token is None

    @property
    def kind(self) -> str:
        return self._judge()[0]

    @property
    def near_tie(self) -> bool:
        return self.kind == NEAR

    @property
    def wrong(self) -> tuple[str, ...]:
        """Names of the sides whose chosen token is not their own top-1."""
        return tuple(s.name for s in (self.left, self.right) if s.top1_verdict[0] is False)

    def _judge(self) -> tuple[str, str]:
        if self.length_only:
            return LENGTH, ""
        verdicts = [(s, *s.top1_verdict) for s in (self.left, self.right)]
        wrong = [why for _, ok, why in verdicts if ok is False]
        if wrong:
            return WRONG, "wrong token: " + "; ".join(wrong)
        unknown = [why for _, ok, why in verdicts if ok is None]
        if unknown:
            return UNPROVEN, "not shown to be a near-tie: " + "; ".join(unknown)
        margins = (self.left.margin, self.right.margin)
        if any(m is None for m in margins):
            return UNPROVEN, "not shown to be a near-tie: a side has fewer than two top candidates"
        swapped = _comparable(self.left, self.right) and not (
            self.left.runner_up == self.right.key and self.right.runner_up == self.left.key
        )
        if swapped:
            return CLEAR, "not a near-tie: the two sides' top candidates are not the same pair swapped"
        if max(margins) < self.near_tie_threshold:
            return NEAR, (
                f"near-tie: both sides chose their own top-1 with top-2 margins under "
                f"{self.near_tie_threshold:g}, so a rounding difference can flip the greedy choice"
            )
        return CLEAR, (
            f"not a near-tie: both sides chose their own top-1, margins {margins[0]:.6f} and "
            f"{margins[1]:.6f} (a near-tie needs both under {self.near_tie_threshold:g})"
        )

    def describe(self) -> str:
        if self.length_only:
            return (
                f"{self.left.name} has {self.left.length} tokens, {self.right.name} {self.right.length}; "
                f"equal over the first {self.index}"
            )
        return (
            f"first differing token at index {self.index}: {self.left.describe()} vs {self.right.describe()}; "
            f"{self._judge()[1]}"
        )

    def to_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            ok, why = s.top1_verdict
            return {
                "name": s.name,
                "token": s.token,
                "key": s.key,
                "logprob": s.logprob,
                "margin": s.margin,
                "length": s.length,
                "own_top1": ok,
                "why": why,
            }

        return {
            "index": self.index,
            "kind": self.kind,
            "near_tie": self.near_tie,
            "left": side(self.left),
            "right": side(self.right),
        }


def _comparable(left: Side, right: Side) -> bool:
    """Both sides name candidates the same way (both texts or both ids), so their pairs can be matched."""
    kinds = {type(k) for k in (left.key, right.key, left.runner_up, right.runner_up)}
    return type(None) not in kinds and len(kinds) == 1


def compare_answers(
    *, left_name: str, left: Any, right_name: str, right: Any, near_tie: float = NEAR_TIE
) -> Divergence | None:
    """None when both answers have the same token ids; else where they differ, and of what kind."""
    index = first_difference(left.token_ids, right.token_ids)
    if index is None:
        return None
    return Divergence(index, _side(left_name, left, index), _side(right_name, right, index), near_tie)


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
