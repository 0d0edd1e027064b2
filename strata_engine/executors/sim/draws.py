"""The simulator's tokens: a made-up next-token distribution per (prompt, position) and a seeded draw from it.

Contract: `sim_token(digest, index, engine_seed, ...)` is a pure function of the prompt's digest, the output
index, the engine's seed and the request's sampling (temperature, top_p, top_k and the request's seed), so a
request gets the same tokens solo or interleaved, and a seeded request the same tokens every run. The
distribution puts over half its mass on one token (the greedy pick, skewed to low ids as frequent tokens
are) and halves the rest over `CANDIDATES - 1` others; a sampled request draws among them after
temperature, top-k and top-p, as runtime/sampler.py does over real logits, so gates that check seeded
sampling see real draws. Greedy requests get exactly what the simulator always gave.
"""

from __future__ import annotations

import hashlib
import math

from ...tokens import SampledToken

CANDIDATES = 21  # the most likely token and 20 others (OpenAI's largest top_logprobs)


def _uniforms(data: bytes) -> tuple[float, float]:
    h = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(h[:8], "little") / 2**64, int.from_bytes(h[8:], "little") / 2**64


def sim_token(
    digest: bytes,
    index: int,
    engine_seed: int,
    vocab_size: int,
    eos_token_id: int,
    eos_probability: float,
    logprobs: int | None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
) -> SampledToken:
    """The token at output `index` (see the module's contract)."""
    u1, u2 = _uniforms(digest + index.to_bytes(8, "little") + engine_seed.to_bytes(8, "little", signed=True))
    if eos_probability > 0 and u2 < eos_probability:
        token = eos_token_id
    else:
        token = int(vocab_size * u1**3)
        if token == eos_token_id:
            token = (token + 1) % vocab_size
    p0 = 0.5 + 0.45 * ((u2 * 7919.0) % 1.0)  # over half the mass: the greedy token is the most likely
    probs = [p0] + [(1.0 - p0) / 2**j for j in range(1, CANDIDATES)]
    ids = [token] + [(token + 1 + j * 7919) % vocab_size for j in range(1, CANDIDATES)]
    pick = 0
    if temperature > 0 and token != eos_token_id:
        pick = _draw(
            probs,
            temperature,
            top_p,
            top_k,
            _uniforms(digest + index.to_bytes(8, "little") + seed.to_bytes(8, "little", signed=True) + b"draw")[0],
        )
    if logprobs is None:
        return SampledToken(ids[pick])
    top = tuple((ids[j], math.log(probs[j])) for j in range(min(logprobs, CANDIDATES)))
    return SampledToken(ids[pick], math.log(probs[pick]), top)


def _draw(probs: list[float], temperature: float, top_p: float, top_k: int, u: float) -> int:
    """The index drawn by `u` in [0, 1) from `probs` (sorted descending) after temperature, top-k and top-p."""
    logits = [math.log(p) / temperature for p in probs]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    if top_k:
        weights = weights[:top_k]
    total = sum(weights)
    kept, mass = [], 0.0
    for w in weights:  # top-p: the smallest head whose mass reaches top_p (the first always kept)
        if kept and mass >= top_p * total:
            break
        kept.append(w)
        mass += w
    target, acc = u * sum(kept), 0.0
    for i, w in enumerate(kept):
        acc += w
        if target < acc:
            return i
    return len(kept) - 1
