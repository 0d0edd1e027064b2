"""The compiled step's inductor cache (runtime/compiled_step.py): the template graphs' cache entries are keyed by
the model's weights and this CPU beyond inductor's own key, oneDNN is off only around their compile, and (slow)
a second step over the same weights loads its graph from the cache while other weights of the same shapes
compile their own."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch
from torch._dynamo.utils import counters

from test_compiled_step import decode
from strata_engine.model import load_model
from strata_engine.model.kv_cache import KVCache
from strata_engine.runtime.compile_cache import compile_cache_tag, cpu_tag, inductor_options, tag_every_compile
from strata_engine.runtime.compiled_step import CompiledDecode
from strata_engine.runtime.invariance import apply_row_tile


def test_the_cache_tag_follows_the_weights():
    model = load_model("strata-tiny-moe")[0]
    tag = compile_cache_tag(model)
    assert tag == compile_cache_tag(load_model("strata-tiny-moe")[0]), "the same weights, the same tag"
    with torch.no_grad():
        model.layers[1].self_attn.o_proj.weight[3, 5] += 1e-3  # one weight, the same shapes
    assert compile_cache_tag(model) != tag
    assert "cpu " in tag and "weights " in tag


def test_the_template_options_turn_onednn_off_only_inside():
    was = torch.backends.mkldnn.enabled
    with inductor_options("template", "tag-1"):
        assert not torch.backends.mkldnn.enabled
        assert torch._inductor.config.freezing and torch.compiler.config.cache_key_tag == "tag-1"
    assert torch.backends.mkldnn.enabled == was and torch.compiler.config.cache_key_tag == ""
    with inductor_options("aten", "tag-2"):
        assert torch.backends.mkldnn.enabled == was and not torch._inductor.config.freezing
        assert torch.compiler.config.cache_key_tag == "tag-2"


def test_the_cache_tag_follows_atens_vector_level():
    """An entry made at another ATEN_CPU_CAPABILITY gave wrong logits, or corrupted the heap, when loaded: the
    tag, for MKL's GEMMs too, holds the level."""
    model = load_model("strata-tiny-moe")[0]
    here = compile_cache_tag(model, "aten")
    assert "weights" not in here and torch.backends.cpu.get_cpu_capability() in here
    code = (
        "from strata_engine.model import load_model; from strata_engine.runtime.compile_cache import compile_cache_tag;"
        "print(compile_cache_tag(load_model('strata-tiny-moe')[0], 'aten'))"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert there.stdout.split()[-1] == "DEFAULT" and there.stdout.strip() != here


def test_a_recompile_outside_the_warm_up_is_keyed_by_the_cpu_and_level_too(monkeypatch):
    """A step recompiled where its guards fail (another thread count) is outside the warm-up's tag: without a
    process default it was keyed by no level, and at ATEN_CPU_CAPABILITY=avx2 loaded an AVX-512 entry (wrong
    tokens). A default someone else set stays."""
    monkeypatch.setattr(torch.compiler.config, "cache_key_tag", "")
    tag_every_compile()
    assert torch.compiler.config.cache_key_tag == cpu_tag()
    assert torch.backends.cpu.get_cpu_capability() in cpu_tag()
    monkeypatch.setattr(torch.compiler.config, "cache_key_tag", "theirs")
    tag_every_compile()
    assert torch.compiler.config.cache_key_tag == "theirs"


def _warm_up(model) -> dict:
    """inductor's cache counters over one template step's warm-up (its one graph, 2 slots at row tile 4)."""
    apply_row_tile(model, 4)
    counters.clear()
    kv = KVCache(model.config, num_slots=2, ctx=64)
    CompiledDecode(model, range(model.config.num_layers), kv, True, True, 4, 2, threads=1, gemms="template")
    return dict(counters["inductor"])


@pytest.mark.slow
def test_a_warm_template_step_comes_from_the_cache(tmp_path, monkeypatch):
    """Compiled once into an empty cache; a second step over the same weights loads it; one weight changed (same
    shapes) compiles its own, and its tokens follow the new weights as the eager step's do."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    first = _warm_up(load_model("strata-tiny-moe")[0])
    assert first.get("fxgraph_cache_miss") == 1 and not first.get("fxgraph_cache_bypass"), first
    second = _warm_up(load_model("strata-tiny-moe")[0])
    assert second.get("fxgraph_cache_hit") == 1 and not second.get("fxgraph_cache_miss"), second
    other = load_model("strata-tiny-moe")[0]
    with torch.no_grad():
        other.lm_head.weight.mul_(-1)  # same shapes, other tokens
    changed = _warm_up(other)
    assert changed.get("fxgraph_cache_miss") == 1 and not changed.get("fxgraph_cache_hit"), changed
    prompts = [list(b"def f("), list(b"import os")]
    compiled, _ = decode(other, prompts, 6, compiled=True, tile=4, gemms="template")
    assert compiled == decode(other, prompts, 6, compiled=False, tile=4)[0]


def test_the_vec_isa_probe_runs_once_and_the_warm_up_can_wait_for_it():
    from strata_engine.runtime import compiled_step

    compiled_step.probe_vec_isa()
    compiled_step.probe_vec_isa()  # one probe at a time: the second call finds the first running or done
    assert compiled_step._probed.wait(120)
    assert len([t for t in threading.enumerate() if t.name == "strata-vec-isa-probe"]) <= 1


def test_overlapping_compiles_put_onednn_back_only_when_the_last_one_ends():
    """Stage threads compile at once: the switch is the process's, so one compile ending must not turn oneDNN
    back on under another, nor leave it off after both."""
    from strata_engine.runtime.compile_cache import _onednn_off

    was = torch.backends.mkldnn.enabled
    first, second = _onednn_off(), _onednn_off()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not torch.backends.mkldnn.enabled  # the second compile is still running
    second.__exit__(None, None, None)
    assert torch.backends.mkldnn.enabled == was
