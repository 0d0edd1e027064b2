"""The native decode experts (runtime/native/decode_experts.py): each decode row through its chosen experts only,
against the every-expert MoE the compiled step runs without it.

Not bitwise ATen's GEMMs (another summation order), so the tests compare with float64 math, check that a row's
bits do not depend on the rows beside it (the property batch invariance rests on), that padding rows give zeros,
both weight layouts (rows or columns contiguous), and that a bad input is an error naming what is wrong. Built once
per machine; where it cannot be built the tests skip, saying why.
"""

from __future__ import annotations

import re

import pytest
import torch

from strata_engine.model.transformer import MoE
from strata_engine.runtime.native import decode_experts

from helpers import native_op_fixtures, random_moe


the_op_serves, native = native_op_fixtures(decode_experts.ENV, decode_experts.native_decode_experts, "decode experts")


def _moe() -> MoE:
    return random_moe(8, 2, seed=0)


def _inputs(moe: MoE, rows: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, moe.gate.in_features, generator=g)
    _, weights, experts = moe.route(x)
    return x, weights, experts


def _float64(moe: MoE, x, weights, experts, slots) -> torch.Tensor:
    out = torch.zeros(x.shape, dtype=torch.float64)
    gate_up, down = moe.gate_up_proj.double(), moe.down_proj.double()
    inter = down.shape[2]
    for r in range(x.shape[0]):
        if slots[r] < 0:
            continue
        for e, w in sorted(zip(experts[r].tolist(), weights[r].tolist())):
            h = gate_up[e] @ x[r].double()
            out[r] += w * (down[e] @ (torch.nn.functional.silu(h[:inter]) * h[inter:]))
    return out


def _columns(t: torch.Tensor) -> torch.Tensor:
    """The same matrices with columns contiguous (the engine's GEMM weight layout)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("rows,real", [(1, 1), (4, 1), (4, 4), (8, 6), (16, 13)])
def test_each_row_is_its_chosen_experts_in_float64_math(native, layout, rows, real):
    moe = _moe()
    x, weights, experts = _inputs(moe, rows)
    slots = torch.tensor(list(range(real)) + [-1] * (rows - real))
    gate_up, down = (
        (moe.gate_up_proj, moe.down_proj) if layout == "rows" else map(_columns, (moe.gate_up_proj, moe.down_proj))
    )
    with torch.no_grad():
        out = native(x, weights, experts, gate_up, down, slots)
    expected = _float64(moe, x, weights, experts, slots)
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(out[real:]) == 0  # padding rows give zeros


def test_the_every_expert_moe_agrees(native):
    moe = _moe()
    x, weights, experts = _inputs(moe, 6)
    with torch.no_grad():
        out = native(x, weights, experts, moe.gate_up_proj, moe.down_proj, torch.arange(6))
        every = moe._every_expert(x, weights, experts)
    assert torch.allclose(out, every, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it(native, layout):
    moe = _moe()
    x, weights, experts = _inputs(moe, 9)
    gate_up, down = (
        (moe.gate_up_proj, moe.down_proj) if layout == "rows" else map(_columns, (moe.gate_up_proj, moe.down_proj))
    )
    with torch.no_grad():
        together = native(x, weights, experts, gate_up, down, torch.arange(9))
        for r in range(9):
            alone = native(x[r : r + 1], weights[r : r + 1], experts[r : r + 1], gate_up, down, torch.tensor([0]))
            assert torch.equal(alone[0], together[r]), f"row {r} changed beside other rows"
        moved = native(x.flip(0), weights.flip(0), experts.flip(0), gate_up, down, torch.arange(9))
    assert torch.equal(moved.flip(0), together)


def test_the_thread_count_does_not_change_the_bits(native):
    """The op runs serial today, so no thread count can move its bits: this guards a parallel version to come
    (one that splits experts or rows over threads must keep each output's adds in the same order)."""
    moe = _moe()
    x, weights, experts = _inputs(moe, 8)
    gate_up, down = map(_columns, (moe.gate_up_proj, moe.down_proj))
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            with torch.no_grad():
                outs.append(native(x, weights, experts, gate_up, down, torch.arange(8)))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: {**a, "x": a["x"].double()}, re.escape("x must be [N, D] float32")),
        (lambda a: {**a, "experts": a["experts"] + 8}, "expert id 1[0-5] out of range"),
        (lambda a: {**a, "slots": a["slots"][:2]}, re.escape("slots must be [N]")),
        (lambda a: {**a, "down": a["down"][:, :, :40]}, re.escape("must match x [N, D]")),
        (lambda a: {**a, "weights": a["weights"][:, :1]}, re.escape("weights and experts must be [N, k]")),
    ],
)
def test_a_bad_input_is_an_error_naming_it(native, change, message):
    moe = _moe()
    x, weights, experts = _inputs(moe, 3)
    args = {
        "x": x,
        "weights": weights,
        "experts": experts,
        "gate_up": moe.gate_up_proj,
        "down": moe.down_proj,
        "slots": torch.arange(3),
    }
    with pytest.raises(RuntimeError, match=message), torch.no_grad():
        native(*change(args).values())


def test_its_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv(decode_experts.ENV, "0")
    assert decode_experts.native_decode_experts() is None
