"""Determinism: a prompt's greedy tokens are the same solo or batched with other slots, at any chunk size.

The batched run mimics the engine: requests start at different steps, read their prompts chunk by
chunk (two readers share one call when they can), and every step decodes all readers that are done in
one call whose rows sit at different positions of different slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from helpers import ARCHITECTURES, greedy
from tokens_equal import assert_tokens_equal
from strata_engine.model.kv_cache import KVCache
from strata_engine.model import load_model

NEW_TOKENS = 20


@dataclass
class Req:
    prompt: list[int]
    slot: int
    start_step: int
    read: int = 0
    out: list[int] = field(default_factory=list)


def prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(7)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (29, 13, 40)]


def run_batched(model, reqs: list[Req], chunk: int) -> None:
    kv = KVCache(model.config, num_slots=4, ctx=64)
    step = 0
    with torch.inference_mode():
        while any(len(r.out) < NEW_TOKENS for r in reqs):
            decoders = [r for r in reqs if r.read == len(r.prompt) and 0 < len(r.out) < NEW_TOKENS]
            if decoders:
                logits = model(
                    torch.tensor([[r.out[-1]] for r in decoders]),
                    torch.tensor([[len(r.prompt) + len(r.out) - 1] for r in decoders]),
                    kv,
                    torch.tensor([r.slot for r in decoders]),
                )
                for row, r in enumerate(decoders):
                    r.out.append(int(logits[row, -1].argmax()))
            readers = [r for r in reqs if step >= r.start_step and r.read < len(r.prompt)]
            if readers:
                tokens = min(chunk, len(readers[0].prompt) - readers[0].read)
                rows = [readers[0]] + [r for r in readers[1:2] if len(r.prompt) - r.read >= tokens]
                logits = model(
                    torch.tensor([r.prompt[r.read : r.read + tokens] for r in rows]),
                    torch.tensor([list(range(r.read, r.read + tokens)) for r in rows]),
                    kv,
                    torch.tensor([r.slot for r in rows]),
                )
                for row, r in enumerate(rows):
                    r.read += tokens
                    if r.read == len(r.prompt):
                        r.out.append(int(logits[row, -1].argmax()))
            step += 1


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("chunk", [1, 4, 16, 64])
def test_solo_equals_batched(arch, chunk, hf_checkpoint):
    directory, _ = hf_checkpoint(arch)
    model, config = load_model(directory)
    texts = prompts(config.vocab_size)
    # slots out of order, starts staggered so reads overlap other slots' decoding
    reqs = [
        Req(texts[0], slot=3, start_step=0),
        Req(texts[1], slot=0, start_step=2),
        Req(texts[2], slot=1, start_step=5),
    ]
    run_batched(model, reqs, chunk)
    for i, req in enumerate(reqs):
        solo = greedy(model, req.prompt, NEW_TOKENS, chunk=len(req.prompt))  # whole prompt in one call, slot 0
        assert_tokens_equal(
            expected=solo,
            actual=req.out,
            label=f"{arch} request {i} chunk={chunk}",
            expected_name="solo",
            actual_name="batched",
        )


@pytest.mark.parametrize("chunk", [1, 4, 16])
def test_chunked_read_equals_whole_read(chunk, hf_checkpoint):
    directory, _ = hf_checkpoint("qwen3_moe")
    model, config = load_model(directory)
    prompt = prompts(config.vocab_size)[2]
    whole = greedy(model, prompt, NEW_TOKENS, chunk=len(prompt))
    assert_tokens_equal(
        expected=whole,
        actual=greedy(model, prompt, NEW_TOKENS, chunk=chunk, slot=2, num_slots=3),
        label=f"chunk={chunk}",
        expected_name="whole prompt",
        actual_name=f"chunks of {chunk}",
    )


def test_rows_do_not_see_each_other(hf_checkpoint):
    """A row's logits are the same whatever the other rows of the call hold (up to float rounding)."""
    directory, _ = hf_checkpoint("mixtral")
    model, config = load_model(directory)
    gen = torch.Generator().manual_seed(3)
    a, b, c = (torch.randint(0, config.vocab_size, (8,), generator=gen) for _ in range(3))
    with torch.inference_mode():
        kv1 = KVCache(config, num_slots=2, ctx=16)
        alone = model(a[None], torch.arange(8)[None], kv1, torch.tensor([0]))
        kv2 = KVCache(config, num_slots=2, ctx=16)
        with_b = model(torch.stack([a, b]), torch.arange(8).expand(2, 8), kv2, torch.tensor([0, 1]))
        kv3 = KVCache(config, num_slots=2, ctx=16)
        with_c = model(torch.stack([c, a]), torch.arange(8).expand(2, 8), kv3, torch.tensor([1, 0]))
    torch.testing.assert_close(with_b[0], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(with_c[1], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(kv2[0].k[0], kv1[0].k[0], rtol=0, atol=1e-5)
