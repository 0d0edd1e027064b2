"""The pure arithmetic of reading a prompt while other slots decode (spec PR 2050, `batch_read.hpp`).

Contract: small functions of plain numbers, no state, no clock. The scheduler calls them to decide
how many prompt tokens one read unit covers, how long the decoding slots run after a piece, and
whether a read starts with a lead-in. The opt-in modes beyond the spec (mixed read, pause target) are
in `read_policy`. Bad arguments raise ValueError naming the argument.
"""

from __future__ import annotations

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
    unit is `piped_read_piece(piece_tokens, chunk)`. The 0 is why the pipelined path never decoded
    during a read before the spec's change: the whole prompt was one run.
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
