"""The native chunk attention (runtime/native/chunk_attention.py) against the flash paths it stands in for (`attend_row`
without a hook), called as the model calls it: with the op's hook, which the runtime installs on each attention.

The op is built once per machine (g++ and ninja; torch's extension cache keeps it), so the first run of
this file pays ~30 s; where it cannot be built the tests skip, saying why, and prompt chunks take the flash
paths.
"""

from __future__ import annotations

import pytest
import torch

from strata_engine.config import EngineConfig
from strata_engine.kernel_switches import KERNEL_ENVS
from strata_engine.model import load_model
from strata_engine.model.attention import attend_row

from strata_engine.runtime.native import chunk_attention
from strata_engine.runtime.native.choice import install

from helpers import native_op_fixtures


def attend(q, keys, values, positions, window):
    """A prompt chunk's attention as an attention layer with the op installed runs it."""
    return attend_row(q, keys, values, positions, True, window, chunk=chunk_attention.attend_chunk)


the_op_serves, native = native_op_fixtures(
    chunk_attention.ENV, chunk_attention.native_chunk_attention, "chunk attention"
)


def _row(tokens: int, start: int, heads: int, kv_heads: int, dim: int, seed: int):
    """q [1, H, T, hd] as the engine passes it (a transposed view of [T, H + Hkv, hd]), and slot 1's keys and
    values as views of a 3-slot cache with room after them."""
    g = torch.Generator().manual_seed(seed)
    length = start + tokens
    caches = [torch.randn(3, kv_heads, length + 7, dim, generator=g) for _ in range(2)]
    q = torch.randn(tokens, heads + kv_heads, dim, generator=g)[:, :heads].transpose(0, 1)[None]
    return q, caches[0][1:2, :, :length], caches[1][1:2, :, :length], torch.arange(start, length)


@pytest.mark.parametrize("window", [None, 1024, 16, 1])
@pytest.mark.parametrize("tokens,start", [(256, 2048), (256, 0), (37, 1000), (2, 5), (9, 1030)])
def test_native_equals_the_flash_paths(native, window, tokens, start):
    q, keys, values, positions = _row(tokens, start, 8, 4, 32, seed=tokens + start)
    got = attend(q, keys, values, positions, window)
    want = attend_row(q, keys, values, positions, True, window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 64), (8, 2, 128), (6, 3, 32)])
def test_other_head_counts_and_widths(native, heads, kv_heads, dim):
    q, keys, values, positions = _row(70, 300, heads, kv_heads, dim, seed=dim)
    torch.testing.assert_close(
        attend(q, keys, values, positions, 64),
        attend_row(q, keys, values, positions, True, 64),
        rtol=1e-5,
        atol=2e-6,
    )


def test_a_querys_result_does_not_depend_on_the_other_queries(native):
    q, keys, values, positions = _row(40, 1500, 8, 4, 32, seed=3)
    before = attend(q, keys, values, positions, 1024)
    other = q.clone()
    other[:, :, ::2] = torch.randn_like(other[:, :, ::2])  # every other query of the chunk changed
    after = attend(other, keys, values, positions, 1024)
    assert torch.equal(before[:, :, 1::2], after[:, :, 1::2])
    assert not torch.equal(before[:, :, ::2], after[:, :, ::2])


def test_the_switch_turns_it_off_and_a_bad_value_is_named(native, monkeypatch):
    assert chunk_attention.native_chunk_attention() is native
    q, keys, values, positions = _row(16, 100, 8, 4, 32, seed=5)
    assert chunk_attention.attend_chunk(q, keys, values, 1024) is not None  # the hook answers with the op
    monkeypatch.setenv(chunk_attention.ENV, "0")
    assert chunk_attention.native_chunk_attention() is None
    assert chunk_attention.attend_chunk(q, keys, values, 1024) is None  # and declines: the flash paths serve
    assert torch.equal(attend(q, keys, values, positions, 1024), attend_row(q, keys, values, positions, True, 1024))
    monkeypatch.setenv(chunk_attention.ENV, "yes")
    with pytest.raises(ValueError, match="STRATA_CHUNK_KERNEL='yes' is not one of 0, 1, auto"):
        chunk_attention.native_chunk_attention()


def test_a_bare_model_runs_the_flash_paths_and_the_runtime_installs_the_op():
    model, _ = load_model("strata-tiny-moe")
    layers = [layer.self_attn for layer in model.layers]
    assert all(attention.chunk_attention is None for attention in layers)  # the plain model: ATen's paths
    install(model)
    assert all(attention.chunk_attention is chunk_attention.attend_chunk for attention in layers)


@pytest.mark.parametrize("name", KERNEL_ENVS)
def test_a_bad_switch_is_named_before_the_engine_loads(name):
    with pytest.raises(ValueError, match=f"{name}='on' is not one of 0, 1, auto"):
        EngineConfig(env={name: "on"})
    EngineConfig(executor="sim", env={name: "on"})  # the sim executor runs no kernel
