"""Turn one row of logits into a SampledToken: greedy argmax, or seeded temperature/top-k/top-p sampling.

Greedy is a plain argmax over float32 logits so it is independent of batch composition. A seeded
request draws from its own torch.Generator, so the same seed gives the same tokens wherever it runs.
"""

from __future__ import annotations

import torch

from ..tokens import SampledToken
from ..params import SamplingParams


class Sampler:
    def __init__(self, params: SamplingParams, seed: int):
        self.params = params
        self._generator: torch.Generator | None = None
        if not params.greedy:
            self._generator = torch.Generator(device="cpu")
            self._generator.manual_seed(params.seed if params.seed is not None else seed)

    def sample(self, logits: torch.Tensor) -> SampledToken:
        """logits: [V] float32 on any device."""
        logits = logits.float().cpu()
        p = self.params
        if p.greedy:
            token_id = int(torch.argmax(logits))
        else:
            scaled = logits / p.temperature
            if p.top_k:
                kth = torch.topk(scaled, min(p.top_k, scaled.numel())).values[-1]
                scaled = scaled.masked_fill(scaled < kth, float("-inf"))
            probs = torch.softmax(scaled, dim=-1)
            if p.top_p < 1.0:
                sorted_probs, order = torch.sort(probs, descending=True)
                keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < p.top_p
                mask = torch.zeros_like(probs, dtype=torch.bool)
                mask[order[keep]] = True
                probs = torch.where(mask, probs, torch.zeros_like(probs))
                probs = probs / probs.sum()
            token_id = int(torch.multinomial(probs, 1, generator=self._generator))
        if p.logprobs is None:
            return SampledToken(token_id)
        logprobs = torch.log_softmax(logits, dim=-1)
        top: tuple[tuple[int, float], ...] = ()
        if p.logprobs > 0:
            values, ids = torch.topk(logprobs, p.logprobs)
            top = tuple((int(i), float(v)) for i, v in zip(ids, values))
        return SampledToken(token_id, float(logprobs[token_id]), top)
