"""The HTTP fake engine's answers (fakes.http_engine): no model, a hash of the prompt and the position.

Contract: `token_at(prompt, index, vocab, salt)` is a token id in [1, vocab) that depends only on its arguments,
so a greedy answer is the same whatever runs beside it and a different `salt` plays a different build;
`logprobs_at(prompt, index)` is the chosen token's logprob and its margin over the runner-up, likewise fixed.
"""

from __future__ import annotations

import hashlib


def token_at(prompt: list[int], index: int, vocab: int, salt: str = "") -> int:
    digest = hashlib.sha256(f"{salt}{prompt}|{index}".encode()).digest()
    return 1 + int.from_bytes(digest[:4], "little") % (vocab - 1)


def logprobs_at(prompt: list[int], index: int) -> tuple[float, float]:
    """(chosen logprob, top-2 margin), deterministic per position."""
    digest = hashlib.sha256(f"lp|{prompt}|{index}".encode()).digest()
    return -(digest[0] / 128.0), 0.05 + digest[1] / 64.0
