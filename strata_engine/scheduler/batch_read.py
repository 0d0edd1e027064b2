"""The pure arithmetic of reading a prompt while other slots decode (spec PR 2050, `batch_read.hpp`).

Contract: small functions of plain numbers, no state, no clock. The scheduler calls them to decide
how many prompt tokens one read unit covers, how long the decoding slots run after a piece, and
whether a read starts with a lead-in; the executors call issue 7's (`run_end_estimate_ms`,
`ride_along`) inside a run, so the torch and simulated executors follow one rule. Bad arguments raise
ValueError naming the argument.
"""
from __future__ import annotations

from typing import Sequence

MAX_PIECE_CHUNKS = 32  # the spec's cap: a piece is at most 32 chunks


def _check_chunk(chunk: int) -> None:
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"prefill chunk must be an integer >= 1 token, got {chunk!r}")


def piped_read_piece(piece_tokens: int, chunk: int) -> int:
    """Tokens per piece of a pipelined read: `piece_tokens` rounded to whole chunks, at least 1 and at
    most 32 chunks; 0 when pieces are off (unset or 0 = the whole prompt in one run).

    Rounding is to the nearest whole chunk, halves up (1.5 chunks -> 2), so a piece size written in
    tokens (16384) lands on the chunk count a reader expects whatever the chunk size.
    """
    _check_chunk(chunk)
    if not isinstance(piece_tokens, int) or isinstance(piece_tokens, bool) or piece_tokens < 0:
        raise ValueError(f"piece size must be an integer >= 0 tokens, got {piece_tokens!r}")
    if piece_tokens == 0:
        return 0
    chunks = (2 * piece_tokens + chunk) // (2 * chunk)  # round half up, in integers
    return min(max(chunks, 1), MAX_PIECE_CHUNKS) * chunk


def piped_decode_budget_ms(piece_ms: float, share: float, min_ms: float, max_ms: float) -> float:
    """Decode time after a piece: clamp(share x piece_ms, min_ms, max_ms)."""
    if piece_ms < 0:
        raise ValueError(f"piece_ms must be >= 0, got {piece_ms}")
    if share < 0:
        raise ValueError(f"decode share must be >= 0, got {share}")
    if min_ms < 0 or max_ms < min_ms:
        raise ValueError(f"decode budget bounds must satisfy 0 <= min_ms <= max_ms, got min {min_ms}, max {max_ms}")
    return min(max(share * piece_ms, min_ms), max_ms)


def piped_read_lead_in(previous_was_read: bool, decoding: bool, pieces: bool = True) -> bool:
    """A piecewise read that starts right after another read gives the decoding slots one decode
    budget first; without it, back-to-back reads would pause the streams for both reads at once.
    Nothing to do when no slot decodes, and never in the default one-run read (pieces off)."""
    return bool(pieces and previous_was_read and decoding)


def batch_read_piece(chunk: int, batch_groups: int, piece_tokens: int = 0) -> int:
    """Tokens per read unit; 0 means the whole remaining prompt in one run.

    One group (G = 1) reads one chunk at a time, so slots decode between chunks. Pipelined groups
    (G > 1) return 0, the whole prompt in one pipelined run, unless pieces are set, in which case the
    unit is `piped_read_piece(piece_tokens, chunk)`. The 0 is issue #1906's question 3: it is why the
    pipelined path never decoded during a read before the spec's change.
    """
    _check_chunk(chunk)
    if not isinstance(batch_groups, int) or batch_groups < 1:
        raise ValueError(f"batch_groups must be an integer >= 1, got {batch_groups!r}")
    if batch_groups == 1:
        return chunk
    return piped_read_piece(piece_tokens, chunk)


def next_read_chunks(tokens_read: int, prompt_tokens: int, chunk: int, unit_tokens: int) -> list[tuple[int, int]]:
    """The chunks [start, end) of the next read unit, from `tokens_read` on.

    `unit_tokens` 0 = everything left. Chunks are `chunk` tokens each (the last may be shorter).
    """
    _check_chunk(chunk)
    if not 0 <= tokens_read < prompt_tokens:
        raise ValueError(f"nothing left to read: tokens_read {tokens_read}, prompt_tokens {prompt_tokens}")
    if unit_tokens < 0:
        raise ValueError(f"unit_tokens must be >= 0, got {unit_tokens}")
    end = prompt_tokens if unit_tokens == 0 else min(prompt_tokens, tokens_read + unit_tokens)
    return [(start, min(start + chunk, end)) for start in range(tokens_read, end, chunk)]



def run_interval_ms(completions_ms: Sequence[float]) -> float | None:
    """The time between chunk completions of a full pipeline (one bottleneck-stage time): the mean of
    the last (up to 4) measured intervals, so attention's growth with context shows within a few
    chunks. None before two completions."""
    if len(completions_ms) < 2:
        return None
    recent = list(completions_ms[-5:])
    return (recent[-1] - recent[0]) / (len(recent) - 1)


def ride_along(since_token_ms: float, interval_ms: float | None, num_stages: int, max_gap_ms: float) -> bool:
    """Issue 7's mixed read under a pause target: should a group's decode tokens ride the micro-batch
    issued now? Its token then comes S intervals from now; skipped, the next chance brings it S + 1
    intervals from now. Ride when waiting would leave the group's streams more than max_gap_ms after
    their last token (since_token_ms ago), or when no interval is measured yet."""
    if interval_ms is None:
        return True
    return since_token_ms + (num_stages + 1) * interval_ms > max_gap_ms


def run_end_estimate_ms(completions_ms: Sequence[float], in_flight: int, now_ms: float,
                        prior_interval_ms: float | None = None, num_stages: int = 1) -> float | None:
    """Issue 7's pause target, measured inside a read run (times since the run's start): when the run
    would end if one more chunk were issued now. The new chunk ends (in_flight + 1) intervals after
    the later of now and the last completion; the interval is this run's (run_interval_ms) once two
    chunks are out, before that `prior_interval_ms` (the executor's previous run's), and with neither
    but one completion, that completion over the stage count: the first chunk crossed every stage after
    the run's fixed cost, so this over-estimates (safe). The run's fixed cost is inside the times
    already. None when nothing is known yet."""
    if in_flight < 0:
        raise ValueError(f"in_flight must be >= 0, got {in_flight}")
    interval = run_interval_ms(completions_ms)
    if interval is None:
        interval = prior_interval_ms
    if interval is None and completions_ms:
        interval = completions_ms[0] / num_stages
    if interval is None:
        return None
    return max(now_ms, completions_ms[-1] if completions_ms else 0.0) + (in_flight + 1) * interval
