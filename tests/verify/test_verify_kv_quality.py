"""`strata-verify kv-quality`: a KV format passes its lines on the embedded model, and the negative controls (a
wrong scale, swapped nibbles) fail it, naming the format and the figures that moved."""

from __future__ import annotations

import json

from click.testing import CliRunner

from strata_engine.model import kv_format
from strata_verify.cli import main


def _run(tmp_path, fmt: str):
    junit, raw = tmp_path / "kv.xml", tmp_path / "kv.json"
    result = CliRunner().invoke(main, ["kv-quality", "--kv-dtype", fmt, "--junit", str(junit), "--json", str(raw)])
    return result, junit.read_text(), json.loads(raw.read_text())


def test_q8_passes_its_lines(tmp_path):
    result, junit, raw = _run(tmp_path, "q8")
    assert result.exit_code == 0, result.output
    figures = raw["raw"]["figures"] if "raw" in raw else raw["figures"]
    assert figures["top1_agreement_decisive"] >= 0.995 and figures["mean_kl"] < 3e-3
    assert "q8: top-1 agreement with float32" in junit and "<failure" not in junit


def test_a_wrong_scale_fails_the_check_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(kv_format, "dequant_q8", lambda q, scale: q.float() * (1.5 * scale)[..., None])
    result, junit, _ = _run(tmp_path, "q8")
    assert result.exit_code == 1, result.output
    assert "kv q8: " in result.output and "mean KL" in junit and "<failure" in junit


def test_swapped_nibbles_fail_the_check_naming_it(tmp_path, monkeypatch):
    unpack = kv_format.unpack_nibbles
    swapped = lambda packed: unpack(packed).unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # noqa: E731
    monkeypatch.setattr(kv_format, "unpack_nibbles", swapped)
    result, _, raw = _run(tmp_path, "k8v4")
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and "kv k8v4: " in result.output and "mean KL" in result.output


def test_a_format_without_lines_is_a_usage_error():
    result = CliRunner().invoke(main, ["kv-quality", "--kv-dtype", "f32"])
    assert result.exit_code == 2 and "Invalid value" in result.output
