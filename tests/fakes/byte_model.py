"""The in-process fake engine's model (fakes.engine): bytes for tokens, and logits that need no weights.

Contract: `ByteTokenizer` maps text to its UTF-8 bytes (ids 0-255) and back, id 256 is EOS; `scores(context)`
gives deterministic logits over ALPHABET + EOS that depend only on the last three tokens, so greedy output
is the same whether a request runs alone or beside others.
"""

from __future__ import annotations

import random

EOS = 256
ALPHABET = b"abcdefghijklmnopqrstuvwxyz ,."


class ByteTokenizer:
    vocab_size = 257
    eos_token_id = EOS

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def scores(context: list[int]) -> list[float]:
    """Deterministic logits over ALPHABET + EOS: a function of the last three tokens only."""
    h = 17
    for t in context[-3:]:
        h = (h * 131 + t) % 1_000_003
    rng = random.Random(h)
    return [rng.gauss(0, 2) for _ in ALPHABET] + [rng.gauss(-4, 1)]
