"""The native routed experts (runtime/native/routed_experts.py) against the Python loop of `MoE._routed` it stands in for,
installed on each MoE layer as the runtime installs it (`MoE.routed_experts`).

The op runs ATen's own calls from C++, so its output must be bitwise the loop's: on random routers and on the
embedded model, padded and unpadded, with padding rows, float32 and bfloat16. Built once per machine (g++ and
ninja); where it cannot be built the tests skip, saying why, and the loop serves.
"""

from __future__ import annotations

import pytest
import torch

from strata_engine.model import load_model
from strata_engine.model.transformer import MoE
from strata_engine.runtime.native import routed_experts
from strata_engine.runtime.native.choice import install

from helpers import greedy, native_op_fixtures, random_moe


the_op_serves, native = native_op_fixtures(routed_experts.ENV, routed_experts.native_routed_experts, "routed experts")


def _moe(experts: int, top_k: int, seed: int, dtype=torch.float32) -> MoE:
    moe = random_moe(experts, top_k, seed)
    moe.routed_experts = routed_experts.run_routed  # as the runtime installs it
    return moe.to(dtype)


def _python_loop(moe: MoE, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, monkeypatch) -> torch.Tensor:
    with monkeypatch.context() as patch:
        patch.setenv(routed_experts.ENV, "0")
        return moe._routed(x, weights, experts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("row_tile", [1, 4, 16])
@pytest.mark.parametrize(
    "rows,real,experts,top_k", [(256, 256, 8, 2), (40, 37, 8, 2), (6, 6, 8, 2), (1, 1, 4, 1), (33, 20, 16, 4)]
)
def test_native_is_bitwise_the_python_loop(native, monkeypatch, dtype, row_tile, rows, real, experts, top_k):
    moe = _moe(experts, top_k, seed=rows + experts, dtype=dtype)
    moe.row_tile = row_tile
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(row_tile)).to(dtype)
    _, weights, chosen = moe.route(x)
    weights, chosen = weights[:real], chosen[:real]
    want = _python_loop(moe, x, weights, chosen, monkeypatch)
    got = moe._routed(x, weights, chosen)
    assert torch.equal(got, want)
    assert not got[real:].any()  # padding rows choose no expert


def test_an_expert_nobody_chose_is_skipped_and_a_bad_id_is_named(native, monkeypatch):
    moe = _moe(8, 2, seed=3)
    x = torch.randn(5, 64)
    weights, chosen = torch.full((5, 2), 0.5), torch.tensor([[0, 7]] * 5)
    want = _python_loop(moe, x, weights, chosen, monkeypatch)
    assert torch.equal(native(x, weights, chosen, moe.gate_up_proj, moe.down_proj, 1), want)
    with pytest.raises(RuntimeError, match="expert id 8 out of range"):
        native(x, weights, torch.tensor([[0, 8]] * 5), moe.gate_up_proj, moe.down_proj, 1)


def test_the_embedded_models_greedy_tokens_are_the_same_either_way(native, monkeypatch):
    model, config = load_model("strata-tiny-moe")
    install(model)
    for module in model.modules():
        if isinstance(module, MoE):
            module.row_tile = 4  # the engine's padded routed path, as on CPU in float32
    prompt = list(b"def fibonacci(n):\n    if n < 2:\n        return n\n" * 6)
    native_tokens = greedy(model, prompt, 12, chunk=64)
    monkeypatch.setenv(routed_experts.ENV, "0")
    assert greedy(model, prompt, 12, chunk=64) == native_tokens


def test_the_op_goes_native_unless_turned_off(native, monkeypatch):
    assert routed_experts.native_routed_experts() is native
    monkeypatch.setenv(routed_experts.ENV, "0")
    assert routed_experts.native_routed_experts() is None


def test_a_bare_model_runs_the_loop_and_the_runtime_installs_the_op():
    model, _ = load_model("strata-tiny-moe")
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    assert moes and all(m.routed_experts is None for m in moes)  # the plain model: the Python loop
    install(model)
    assert all(m.routed_experts is routed_experts.run_routed for m in moes)  # what _routed asks


def test_a_bad_switch_is_named(monkeypatch):
    monkeypatch.setenv(routed_experts.ENV, "yes")
    with pytest.raises(ValueError, match="STRATA_EXPERT_KERNEL='yes' is not one of 0, 1, auto"):
        routed_experts.native_routed_experts()
