"""The native decode attention (runtime/native/decode_attention.py) against the per-row ATen op it stands in for.

The op is built once per machine (g++ and ninja; torch's extension cache keeps it), so the first run of
this file pays ~30 s; where it cannot be built the tests skip, saying why, and the engine uses the ATen op.
"""

from __future__ import annotations

import pytest
import torch

from strata_engine.runtime.native import decode_attention
from strata_engine.runtime import step_ops

from helpers import native_op_fixtures

HEADS, KV_HEADS, DIM, CTX = 8, 4, 32, 2048


the_op_serves, native = native_op_fixtures(
    decode_attention.ENV, decode_attention.native_decode_attention, "decode attention"
)


def _case(rows: int, padded: int, positions: list[int], seed: int, dim: int = DIM):
    g = torch.Generator().manual_seed(seed)
    caches = [torch.randn(rows + 1, KV_HEADS, CTX, dim, generator=g) for _ in range(2)]
    q, k, v = (torch.randn(padded, h, dim, generator=g) for h in (HEADS, KV_HEADS, KV_HEADS))
    slots = torch.tensor([rows - i for i in range(rows)] + [-1] * (padded - rows))  # not in order
    at = torch.tensor(positions + [0] * (padded - rows))
    return q, k, v, caches, slots, at


@pytest.mark.parametrize("window", [-1, 1024, 16])
@pytest.mark.parametrize("dim", [32, 24])  # a width the kernel knows, and one it takes at run time
def test_native_equals_the_aten_op_and_writes_the_same_cache(native, window, dim):
    q, k, v, (kc, vc), slots, at = _case(3, 4, [0, 700, 1500], seed=window + dim, dim=dim)
    kc2, vc2 = kc.clone(), vc.clone()
    want = step_ops.decode_attention(q, k, v, kc, vc, slots, at, window, native=False)
    got = native(q, k, v, kc2, vc2, slots, at, window)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)  # each row's key and value at (slot, position)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(got[3], torch.zeros_like(got[3]))  # the padding row


def test_a_rows_result_does_not_depend_on_the_rows_beside_it(native):
    q, k, v, (kc, vc), slots, at = _case(4, 8, [5, 300, 1100, 2000], seed=1)
    together = native(q, k, v, kc.clone(), vc.clone(), slots, at, 1024)
    for i in range(4):
        alone = native(
            q[i : i + 1], k[i : i + 1], v[i : i + 1], kc.clone(), vc.clone(), slots[i : i + 1], at[i : i + 1], 1024
        )
        assert torch.equal(alone[0], together[i])


def test_the_op_goes_native_unless_turned_off(native, monkeypatch):
    assert decode_attention.native_decode_attention() is native
    monkeypatch.setenv(decode_attention.ENV, "0")
    assert decode_attention.native_decode_attention() is None


def test_a_bad_switch_is_named(monkeypatch):
    monkeypatch.setenv(decode_attention.ENV, "off")
    with pytest.raises(ValueError, match="STRATA_DECODE_KERNEL='off' is not one of 0, 1, auto"):
        decode_attention.native_decode_attention()
