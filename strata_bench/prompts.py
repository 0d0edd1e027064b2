"""Cold prompts: a deterministic function of (bench nonce, round, scenario, request), never of the arm.

Arms of one round send identical prompts (so their greedy tokens can be compared), while every round and
every bench directory gets prompts no prefix cache has seen. Token-id prompts are uniform ids below the
vocabulary size with EOS left out; text prompts (servers without token-id input) are seeded random words,
about one token a word, so their length in tokens is approximate.
"""
from __future__ import annotations

import hashlib
import json

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
