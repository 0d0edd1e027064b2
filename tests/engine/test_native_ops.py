"""Which path serves each native op (runtime/native/choice.py): the faster of the op and ATen's, measured at
start on the model's shapes, cached per machine; a fake clock decides here, so nothing depends on this CPU."""

from __future__ import annotations

import pytest
import torch

from strata_engine.model.attention import attend_row
from strata_engine.model.kv_cache import LayerKV
from strata_engine.model.weights import load_model
from strata_engine.runtime.native import (
    build,
    choice,
    chunk_attention,
    decode_experts,
    kv_codec,
    quant_decode_attention,
)
from strata_engine.server.run import ready_line

from helpers import native_op_or_skip


@pytest.fixture
def model(tmp_path, monkeypatch):
    native_op_or_skip(chunk_attention.native_chunk_attention, "chunk attention")
    monkeypatch.setattr(build, "verdicts_path", lambda: tmp_path / "kernel-verdicts.json")
    monkeypatch.setattr(choice, "ROUNDS", 3)
    model, _ = load_model("strata-tiny-moe")
    yield model
    for _, name, *_ in choice.OPS.values():
        build.serve(name, None)


def fake_clock(monkeypatch, native_s: float, aten_s: float) -> list[str]:
    """time_calls answers from the arm's name; returns the arms it was asked for."""
    asked: list[str] = []

    def fake(arm, fn, calls):
        asked.append(arm)
        return native_s if arm == "native" else aten_s

    monkeypatch.setattr(choice, "time_calls", fake)
    return asked


def _chunk(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(40, 8, 32, generator=g).transpose(0, 1)[None]
    keys, values = (torch.randn(1, 4, 1540, 32, generator=g) for _ in range(2))
    return q, keys, values, torch.arange(1500, 1540)


def test_a_slower_op_is_not_served_and_the_engine_says_why(model, monkeypatch):
    fake_clock(monkeypatch, native_s=2e-3, aten_s=1e-3)
    kernels = choice.choose(model, 4, 1, decode=False)
    assert kernels["chunk attention"]["path"] == "aten"
    assert "2.00x ATen's time" in kernels["chunk attention"]["why"]
    assert chunk_attention.native_chunk_attention() is None  # what the installed hook asks: the flash paths serve
    hook = model.layers[0].self_attn.chunk_attention
    assert hook is chunk_attention.attend_chunk
    q, keys, values, positions = _chunk()
    assert torch.equal(
        attend_row(q, keys, values, positions, True, 1024, chunk=hook),
        attend_row(q, keys, values, positions, True, 1024),
    )
    assert "chunk-attention:aten" in ready_line("http://127.0.0.1:1", kernels)


def test_a_faster_op_serves_and_the_verdict_is_kept_for_the_next_start(model, monkeypatch):
    fake_clock(monkeypatch, native_s=1e-3, aten_s=3e-3)
    first = choice.choose(model, 4, 1, decode=False)
    assert first["chunk attention"]["path"] == "native" and chunk_attention.native_chunk_attention() is not None
    asked = fake_clock(monkeypatch, native_s=9.0, aten_s=1e-3)  # a later start would measure otherwise

    def no_arms(*args):
        raise AssertionError("a kept verdict builds no race arms (some copy a layer's weights)")

    monkeypatch.setattr(choice, "OPS", {k: (*op[:4], no_arms) for k, op in choice.OPS.items()})
    again = choice.choose(model, 4, 1, decode=False)
    assert asked == [] and again["chunk attention"]["path"] == "native"
    assert "measured earlier on this machine" in again["chunk attention"]["why"]


def test_a_switch_decides_without_measuring(model, monkeypatch):
    asked = fake_clock(monkeypatch, native_s=1e-3, aten_s=3e-3)
    monkeypatch.setenv(chunk_attention.ENV, "0")
    monkeypatch.setenv("STRATA_EXPERT_KERNEL", "1")
    monkeypatch.delenv("STRATA_NATIVE_MARCH", raising=False)  # the suite may run at a forced ISA level
    kernels = choice.choose(model, 4, 1, decode=False)
    assert kernels["chunk attention"] == {"path": "aten", "why": "STRATA_CHUNK_KERNEL=0", "march": "native"}
    assert (
        kernels["routed experts"]["path"] == "native" and kernels["routed experts"]["why"] == "STRATA_EXPERT_KERNEL=1"
    )
    assert asked == []


@pytest.mark.parametrize("native_s, path", [(2e-3, "aten"), (5e-4, "native")])
def test_the_decode_experts_serve_the_compiled_step_where_they_measure_faster(model, monkeypatch, native_s, path):
    native_op_or_skip(decode_experts.native_decode_experts, "decode experts")
    fake_clock(monkeypatch, native_s=native_s, aten_s=1e-3)
    assert "decode experts" not in choice.choose(model, 4, 1, decode=False)  # no compiled step, no op
    kernels = choice.choose(model, 4, 1, decode=True)
    assert kernels["decode experts"]["path"] == path
    assert f"{native_s / 1e-3:.2f}x ATen's time" in kernels["decode experts"]["why"]
    # what the compiled step asks when it traces its graphs: the op, or None (every expert on every row)
    assert (decode_experts.native_decode_experts() is not None) == (path == "native")
    assert f"decode-experts:{path}" in ready_line("http://127.0.0.1:1", kernels)


def _quantized_rows(model, fmt: str = "k8v4"):
    """A quantized cache and two decode rows over it: (q, k, v, kv, spans) as the model's hook takes them."""
    c = model.config
    kv = LayerKV(2, c.num_kv_heads, 64, c.head_dim, torch.float32, "cpu", c.sliding_window, fmt)
    g = torch.Generator().manual_seed(0)
    for slot in range(2):
        kv.write_row(slot, 0, *(torch.randn(64, c.num_kv_heads, c.head_dim, generator=g) for _ in range(2)))
    q, k, v = (torch.randn(2, h, c.head_dim, generator=g) for h in (c.num_heads, c.num_kv_heads, c.num_kv_heads))
    return q, k, v, kv, [(0, 0, 40), (1, 10, 64)]


@pytest.mark.parametrize("native_s, path", [(2e-3, "aten"), (5e-4, "native")])
def test_the_quantized_decode_op_serves_where_it_measures_faster_with_a_quantized_cache(
    model, monkeypatch, native_s, path
):
    native_op_or_skip(quant_decode_attention.native_quant_decode_attention, "quantized decode attention")
    fake_clock(monkeypatch, native_s=native_s, aten_s=1e-3)
    assert "quantized decode attention" not in choice.choose(model, 4, 1, decode=False)  # a float32 cache
    kernels = choice.choose(model, 4, 1, decode=False, kv_dtype="k8v4")
    assert kernels["quantized decode attention"]["path"] == path
    assert f"{native_s / 1e-3:.2f}x ATen's time" in kernels["quantized decode attention"]["why"]
    hook = model.layers[0].self_attn.decode_attention
    assert hook is quant_decode_attention.attend_decode
    assert (hook(*_quantized_rows(model)) is None) == (path == "aten")  # None: the dequantized window and ATen
    assert f"quantized-decode-attention:{path}" in ready_line("http://127.0.0.1:1", kernels)


@pytest.mark.parametrize("native_s, path", [(2e-3, "aten"), (5e-4, "native")])
def test_the_kv_codec_serves_where_it_measures_faster_with_a_quantized_cache(model, monkeypatch, native_s, path):
    native_op_or_skip(kv_codec.native_kv_codec, "kv codec")
    fake_clock(monkeypatch, native_s=native_s, aten_s=1e-3)
    assert "kv codec" not in choice.choose(model, 4, 1, decode=False, kv_dtype="bf16")  # nothing to encode
    kernels = choice.choose(model, 4, 1, decode=False, kv_dtype="k8v4")
    assert kernels["kv codec"]["path"] == path
    assert f"{native_s / 1e-3:.2f}x ATen's time" in kernels["kv codec"]["why"]
    hook = model.layers[0].self_attn.kv_codec
    assert hook is kv_codec.CODEC
    kv = LayerKV(1, 4, 16, 32, torch.float32, "cpu", None, "k8v4")
    assert hook.write(kv, 0, 0, torch.ones(3, 4, 32), torch.ones(3, 4, 32)) == (path == "native")
    assert (hook.read(kv, 0, 0, 3) is None) == (path == "aten")  # None: kv_format.py's decode serves
    assert f"kv-codec:{path}" in ready_line("http://127.0.0.1:1", kernels)


def test_the_engine_reports_its_kernels(monkeypatch, tmp_path):
    from strata_engine import Engine

    native_op_or_skip(chunk_attention.native_chunk_attention, "chunk attention")
    monkeypatch.setattr(build, "verdicts_path", lambda: tmp_path / "kernel-verdicts.json")
    fake_clock(monkeypatch, native_s=5e-3, aten_s=1e-3)
    try:
        with Engine.from_pretrained("strata-tiny-moe", batch=2, stage_workers="thread") as engine:
            kernels = engine.info()["kernels"]
        assert kernels["chunk attention"]["path"] == "aten" and kernels["routed experts"]["path"] == "aten"
        assert "5.00x" in kernels["chunk attention"]["why"]
    finally:
        for _, name, *_ in choice.OPS.values():
            build.serve(name, None)
