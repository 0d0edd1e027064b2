"""Cold prompts: a deterministic function of (bench nonce, round, scenario, request), never of the arm.

Arms of one round send identical prompts (so their greedy tokens can be compared), while every round and
every bench directory gets prompts no prefix cache has seen. Token-id prompts are uniform ids below the
vocabulary size with EOS left out; text prompts (servers without token-id input) are seeded random words,
cut to the requested length in the server's own tokens when it can count them (a tokenize endpoint).
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

import numpy as np

# Common short English words: most tokenizers give each one token, so N words ~ N tokens.
_WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were be this which or "
    "had not but have one all they their has been also its new more two first after other who time "
    "when would into year she can over only most some may what many three then about out up these so "
    "him them world state city made later such through part school where used between both during under "
    "well each while however area before much four since around until being those because same people "
    "west east north south game team work life day any long way back high small large old good great"
).split()


def prompt_seed(*parts: object) -> int:
    """A 63-bit seed from the parts (stable across processes and Python versions, unlike hash())."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def token_prompt(seed: int, length: int, vocab_size: int, eos_token_id: int | None = None) -> list[int]:
    if length < 1:
        raise ValueError(f"prompt length must be >= 1, got {length}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    ids = np.random.default_rng(seed).integers(0, vocab_size, size=length)
    if eos_token_id is not None:
        # EOS inside a prompt would end some servers' reads early; shift it to its neighbour.
        ids[ids == eos_token_id] = (eos_token_id + 1) % vocab_size
    return ids.tolist()


def text_prompt(seed: int, length: int) -> str:
    if length < 1:
        raise ValueError(f"prompt length must be >= 1, got {length}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(_WORDS), size=length)
    return " ".join(_WORDS[i] for i in picks)


def prompt_digest(prompt: list[int] | str) -> str:
    """SHA-256 of the prompt as sent: the run JSON keeps this, not 64K ids."""
    return hashlib.sha256(json.dumps(prompt, separators=(",", ":")).encode()).hexdigest()


def sized_text_prompt(seed: int, length: int, count: Callable[[str], int | None]) -> tuple[str, int | None]:
    """A text prompt of `length` tokens as the server counts them (`count` measures a text), and its
    measured length; (about `length` words, None) when the server cannot count. The words are seeded, so
    the same seed and counts give the same text; the longest text not over `length` is kept."""
    words = text_prompt(seed, length).split(" ")
    measured = count(" ".join(words))
    if measured is None:
        return " ".join(words), None
    while measured < length and len(words) < 64 * length:  # tokenizers that merge words: draw more
        words = text_prompt(seed, len(words) * 2).split(" ")
        measured = count(" ".join(words))
        if measured is None:
            return " ".join(words), None
    if measured <= length:
        return " ".join(words), measured
    low, high = 1, len(words)  # binary search: the longest prefix of `words` whose count is <= length
    best = (words[:1], count(words[0]) or 1)
    while low <= high:
        mid = (low + high) // 2
        got = count(" ".join(words[:mid]))
        if got is None:
            return " ".join(words[:mid]), None
        if got <= length:
            best, low = (words[:mid], got), mid + 1
            if got == length:
                break
        else:
            high = mid - 1
    return " ".join(best[0]), best[1]
