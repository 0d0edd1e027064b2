"""The `engines` preset: engine placeholders filled from what is installed; an engine that is not is left out
with a line saying how to install it, and a preset none of whose engines is installed is an error."""

from __future__ import annotations

import pytest

from strata_bench.arms import ArmError
from strata_bench.presets import Preset, PresetError, engine_commands, fill_engines, load_preset


def test_vllm_placeholder_filled_from_the_installed_command(tmp_path, monkeypatch):
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("STRATA_VLLM", str(fake))
    command, missing = fill_engines("{vllm} serve {model_dir} --dtype float32")
    assert (
        missing is None and command.startswith(f"{fake} serve ") and command.endswith("strata-tiny-moe --dtype float32")
    )


def test_engines_not_installed_are_left_out_saying_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_VLLM", str(tmp_path / "absent"))
    monkeypatch.setenv("STRATA_LLAMA_SERVER", str(tmp_path / "absent"))
    preset, notes = load_preset("engines").installed()
    assert [name for name, _ in preset.arms] == [
        "strata-default",
        "strata-release",
        "strata-fastest",
        "strata-fastest-mkl",
    ]
    assert "arm 'vllm' left out: vLLM is not installed: run `bash scripts/install_vllm.sh`" in notes[0]
    assert (
        "arm 'llama-server' left out: llama.cpp's llama-server is not built: run `bash scripts/install_llama_cpp.sh`"
        in notes[1]
    )
    assert all("{" not in command for _, command in preset.arms)


def test_a_preset_with_no_installed_engine_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_VLLM", str(tmp_path / "absent"))
    only_vllm = Preset("v", "", (("a", "{vllm} serve x"), ("b", "{vllm} serve y")), ("two_joiners",), 1, 1.0, 1.0)
    with pytest.raises(PresetError, match="none of its engines is installed"):
        only_vllm.installed()


def test_the_engines_preset_runs_the_spec_scenarios_in_abba_rounds():
    preset = load_preset("engines")
    assert preset.scenarios == ("two_joiners", "followup", "read_alone") and preset.repeat >= 2
    assert {"strata-default", "strata-release", "strata-fastest", "strata-fastest-mkl", "vllm", "llama-server"} == {
        name for name, _ in preset.arms
    }
    assert dict(preset.arms)["strata-default"] == "strata-engine serve --batch 6 --ctx 8192"  # no layout flag


def test_a_preset_runs_the_arms_named_in_its_own_order_and_names_its_arms_for_an_unknown_one():
    preset = load_preset("engines")
    assert [name for name, _ in preset.only("vllm, strata-default").arms] == ["strata-default", "vllm"]
    with pytest.raises(PresetError, match="has no arm 'nope'; its arms: strata-default, strata-release"):
        preset.only("vllm,nope")
    with pytest.raises(PresetError, match="none given"):
        preset.only(" , ")


def test_the_benchmark_scripts_arms_parse_as_runs_do_and_name_what_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_VLLM", str(tmp_path / "absent"))
    assert engine_commands(["a=strata-engine serve", "b=env X=1 strata-engine serve"]) == [
        ("a", "strata-engine serve"),
        ("b", "env X=1 strata-engine serve"),
    ]
    with pytest.raises(ArmError, match="arm 'v': vLLM is not installed: run `bash scripts/install_vllm.sh`"):
        engine_commands(["a=strata-engine serve", "v={vllm} serve x"])
    with pytest.raises(ArmError, match="repeated: \\['a'\\]"):
        engine_commands(["a=x", "a=y"])
    with pytest.raises(ArmError, match="give NAME=COMMAND, not NAME=@URL"):
        engine_commands(["a=@http://127.0.0.1:1"])
