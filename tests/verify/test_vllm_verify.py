"""The gate against vLLM's own OpenAI server (its CPU build, scripts/install_vllm.sh) serving the embedded
model, with `--url`: an engine this project did not write, which has no give-way and no event feed.

Skipped, with the install command, where vLLM is not installed. Declared without give-way the interleave
gate passes, every equality check included, with no hand-given vocabulary (the client shows vLLM's
tokenizer equals ours and sends token ids); without the declaration it fails, naming give-way. vLLM's
greedy answers equal Strata's committed golden ones.
"""

from __future__ import annotations

import json

import pytest

from .support import REPO, SCALE, verify

pytestmark = pytest.mark.slow


# vLLM may hold a new request back while another streams: seen with vLLM alone, B's first token came 19 s after A's
# (its OpenMP worker binds one of two cores; its frontend, engine core and the gate's client share the other). C's
# read and the seeded draw are then not exercised, a verdict on the run, not on vLLM's tokens.
TIMING = {"C read while A and B decode", "S seeded: interleaved == solo"}


def _interleave(url: str, path, *flags: str) -> tuple:
    """The gate's interleave run on `url`: (the process, its steps by name, its JSON report)."""
    result = verify("interleave", "--url", url, "--scale", SCALE, *flags, "--json", str(path))
    report = json.loads(path.read_text())
    return result, {s["name"]: s for s in report["report"]["steps"]}, report


def _passed_but_timing(result, steps: dict) -> None:
    """Exit 0, or exit 1 with only TIMING's steps not exercised; no step failed either way."""
    unexercised = {n for n, s in steps.items() if s["status"] == "not exercised"}
    assert result.returncode == 0 or (result.returncode == 1 and unexercised and unexercised <= TIMING), (
        result.stdout + result.stderr
    )
    assert not [n for n, s in steps.items() if s["status"] == "fail"], result.stdout


def test_interleave_on_vllm_passes_with_give_way_declared_absent(vllm_server, tmp_path):
    declared, steps, report = _interleave(vllm_server, tmp_path / "declared.json", "--lacks", "give-way")
    _passed_but_timing(declared, steps)
    assert steps["D gives way to E"]["status"] in ("not applicable", "pass")
    for name in "ABCDE":
        assert steps[f"{name} interleaved == solo"]["status"] == "pass", steps[f"{name} interleaved == solo"]
    assert report["raw"]["engine"]["family"] == "vllm" and report["raw"]["engine"]["vocab_size"] == 258
    assert "cache_salt" in declared.stdout  # the solo runs kept off vLLM's prefix cache

    spec, steps, _ = _interleave(vllm_server, tmp_path / "spec.json")
    if steps["D gives way to E"]["status"] == "not exercised":  # vLLM never gives way; E may still win the race
        assert spec.returncode == 1 and "--lacks give-way" in spec.stdout, spec.stdout
        assert not [n for n, s in steps.items() if s["status"] == "fail"], spec.stdout
    else:
        _passed_but_timing(spec, steps)


def test_determinism_on_vllm_equals_the_golden_manifest(vllm_server):
    det = verify(
        "determinism", "--url", vllm_server, "--against", str(REPO / "strata_verify" / "golden" / "reference-cpu.json")
    )
    assert det.returncode == 0, det.stdout + det.stderr
    assert "12 passed" in det.stdout
