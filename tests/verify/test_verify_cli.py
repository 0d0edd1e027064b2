"""The real `strata-verify` console script against the synthetic engine and the fault proxy.

Each test is a fault the gate exists to catch (or its absence); they start real processes on free
ports, so each takes a few seconds.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from .support import SCALE, fake, proxied, verify


def test_interleave_passes_on_a_correct_engine(tmp_path):
    junit = tmp_path / "junit.xml"
    out = verify("interleave", "--engine", fake(), "--scale", SCALE, "--junit", str(junit), "--markdown")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("### strata-verify: PASS")
    assert "C read in 4 pieces" in out.stdout and "D gave way at 512 tokens" in out.stdout
    root = ET.parse(junit).getroot()
    assert sum(int(s.get("failures")) for s in root.iter("testsuite")) == 0
    assert sum(int(s.get("tests")) for s in root.iter("testsuite")) == 9


def test_perturbed_interleaved_token_fails_with_its_index(tmp_path):
    junit, raw = tmp_path / "junit.xml", tmp_path / "raw.json"
    out = verify("interleave", "--engine", proxied("--mode perturb --request C --index 3"), "--scale", SCALE,
                 "--junit", str(junit), "--json", str(raw))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "C interleaved == solo: differs at token 3" in out.stdout
    assert "first differing token at index 3" in out.stdout and "top-2 margin" in out.stdout
    for name in "ABDE":  # only C was touched
        assert f"{name} interleaved == solo: " in out.stdout and f"[FAIL] interleave: {name} " not in out.stdout
    failure = ET.parse(junit).getroot().find(".//testcase[@name='C interleaved == solo']/failure")
    assert failure is not None and "token 3" in failure.get("message")
    data = json.loads(raw.read_text())
    c = data["raw"]["interleaved"]["C"]["token_ids"]
    assert c[3] != data["raw"]["solo"]["C"]["token_ids"][3] and c[:3] == data["raw"]["solo"]["C"]["token_ids"][:3]
    assert data["report"]["exit_code"] == 1


def test_an_engine_that_never_yields_fails_the_give_way_as_not_exercised():
    out = verify("interleave", "--engine", proxied("--mode no-yield"), "--scale", SCALE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[NOT EXERCISED] interleave: D gives way to E: D was read to its end without giving way" in out.stdout
    assert "C interleaved == solo: 16 tokens equal" in out.stdout  # the text itself was fine


def test_an_engine_that_dies_mid_run_exits_2_with_its_stderr(tmp_path):
    junit = tmp_path / "junit.xml"
    out = verify("interleave", "--engine", proxied("--mode die --after 3"), "--scale", SCALE, "--junit", str(junit))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "COULD NOT RUN" in out.stdout and "engine exited with status" in out.stdout
    assert "illegal memory access" in out.stdout  # the engine's last stderr lines
    error = ET.parse(junit).getroot().find(".//testcase/error")
    assert error is not None and "illegal memory access" in error.text


def test_an_engine_that_cannot_start_exits_2_with_its_stderr():
    out = verify("determinism", "--engine", fake("--fail-start"))
    assert out.returncode == 2
    assert "exited with status 3 before it was ready" in out.stdout and "cannot load model weights" in out.stdout


def test_determinism_fails_when_the_second_run_differs(tmp_path):
    state = tmp_path / "starts"
    out = verify("determinism", "--engine", proxied(f"--mode drift --request p4 --index 5 --state {state}"), "--tokens", "12")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[    FAIL     ] determinism: p4 same in every run: run 1 and run 2 differ at token 5" in out.stdout
    assert out.stdout.count("[    PASS     ] determinism:") == 5
    assert state.read_text() == "2"  # two fresh engines


def test_determinism_manifest_save_then_against(tmp_path):
    path = tmp_path / "manifest.json"
    out = verify("determinism", "--engine", fake(), "--tokens", "12", "--save", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(path.read_text())
    assert len(data["answers"]) == 6 and data["environment"]["engine"]["version"] == "fake-1"
    for answer in data["answers"]:  # the six hashes are printed
        assert answer["sha256"] in out.stdout
    same = verify("determinism", "--engine", fake(), "--against", str(path))  # --tokens taken from the manifest
    assert same.returncode == 0, same.stdout
    other = verify("determinism", "--engine", fake("--salt", "v2", "--salt-from", "7"), "--against", str(path))
    assert other.returncode == 1
    for name in ("p1", "p2", "p3", "p4", "p5", "p6"):
        assert f"{name} matches manifest.json: answer to {name} differs from manifest.json" in other.stdout
    assert "first differing token at index 7" in other.stdout


def test_missing_or_empty_manifest_is_a_failure(tmp_path):
    out = verify("determinism", "--engine", fake(), "--against", str(tmp_path / "nope.json"))
    assert out.returncode == 1 and "does not exist" in out.stdout
    (tmp_path / "empty.json").write_text("")
    out = verify("determinism", "--engine", fake(), "--against", str(tmp_path / "empty.json"))
    assert out.returncode == 1 and "is empty" in out.stdout


def test_logprobs_must_be_bitwise_where_the_engine_claims_batch_invariance():
    out = verify("interleave", "--engine", fake("--batch-invariant", "--logprob-jitter", "0.001"), "--scale", SCALE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "logprobs interleaved vs solo: the engine claims batch invariance but logprobs differ" in out.stdout
    assert "largest logprob difference 0.001" in out.stdout


def test_builds_side_by_side_name_where_they_differ():
    out = verify("builds", "--engine", f"ref={fake()}", "--engine", f"new={fake('--salt', 'v2', '--salt-from', '5')}",
                 "--scale", SCALE, "--tokens", "8", "--interleave-tokens", "8")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ref: interleave: D gives way to E" in out.stdout and "new: determinism: p6 same in every run" in out.stdout
    assert "builds: p1 same answer (ref vs new): answers differ at token 5" in out.stdout
    assert "builds: C same solo answer (ref vs new): answers differ at token 5" in out.stdout
    assert "[    FAIL     ] new: interleave" not in out.stdout  # each build is consistent with itself


def test_bad_build_spec_is_a_usage_error():
    out = verify("builds", "--engine", "env X=1 serve", "--engine", "b=serve")
    assert out.returncode == 2 and "NAME=COMMAND" in out.stderr
