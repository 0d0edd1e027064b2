"""The real `strata-verify` console script against the synthetic engine and the fault proxy.

Each scenario is a fault the gate exists to catch (or its absence). They start real processes on
free ports and mostly wait, so the module runs them all at once (four at a time) on first use and
each test then reads its scenario's result.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .support import SCALE, fake, proxied, verify


def _save_then_against(tmp: Path):
    path = tmp / "manifest.json"
    saved = verify("determinism", "--engine", fake(), "--tokens", "12", "--save", str(path))
    same = verify("determinism", "--engine", fake(), "--against", str(path))  # --tokens taken from the manifest
    other = verify("determinism", "--engine", fake("--salt", "v2", "--salt-from", "7"), "--against", str(path))
    return saved, same, other, json.loads(path.read_text()) if path.exists() else None


SCENARIOS = {
    "pass": lambda tmp: verify(
        "interleave", "--engine", fake(), "--scale", SCALE, "--junit", str(tmp / "pass.xml"), "--markdown"
    ),
    "perturb": lambda tmp: verify(
        "interleave",
        "--engine",
        proxied("--mode perturb --request C --index 3"),
        "--scale",
        SCALE,
        "--junit",
        str(tmp / "perturb.xml"),
        "--json",
        str(tmp / "perturb.json"),
    ),
    "no-yield": lambda tmp: verify("interleave", "--engine", proxied("--mode no-yield"), "--scale", SCALE),
    "no-yield-declared": lambda tmp: verify(
        "interleave",
        "--engine",
        proxied("--mode no-yield"),
        "--scale",
        SCALE,
        "--lacks",
        "give-way",
        "--junit",
        str(tmp / "declared.xml"),
    ),
    "die": lambda tmp: verify(
        "interleave", "--engine", proxied("--mode die --after 3"), "--scale", SCALE, "--junit", str(tmp / "die.xml")
    ),
    "fail-start": lambda tmp: verify("determinism", "--engine", fake("--fail-start")),
    "drift": lambda tmp: verify(
        "determinism",
        "--engine",
        proxied(f"--mode drift --request p4 --index 5 --state {tmp / 'starts'}"),
        "--tokens",
        "12",
    ),
    "manifest": _save_then_against,
    "batch-invariant": lambda tmp: verify(
        "interleave", "--engine", fake("--batch-invariant", "--logprob-jitter", "0.001"), "--scale", SCALE
    ),
    "builds": lambda tmp: verify(
        "builds",
        "--engine",
        f"ref={fake()}",
        "--engine",
        f"new={fake('--salt', 'v2', '--salt-from', '5')}",
        "--scale",
        SCALE,
        "--tokens",
        "8",
        "--interleave-tokens",
        "8",
    ),
    "builds-broken": lambda tmp: verify(
        "builds",
        "--engine",
        f"ref={fake()}",
        "--engine",
        f"broken={fake('--fail-start')}",
        "--only",
        "determinism",
        "--tokens",
        "4",
    ),
}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify-cli")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run, tmp) for name, run in SCENARIOS.items()}
        results = {name: future.result() for name, future in futures.items()}
    return lambda name: (results[name], tmp)


def test_interleave_passes_on_a_correct_engine(scenario):
    out, tmp = scenario("pass")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("### strata-verify: PASS")
    assert "C read in 4 pieces" in out.stdout and "D gave way at" in out.stdout
    root = ET.parse(tmp / "pass.xml").getroot()
    assert sum(int(s.get("failures")) for s in root.iter("testsuite")) == 0
    # 3 interleavings, 5 equalities, resume offsets, logprobs; the field's: S seeded twice, S and E stream == non-stream
    assert sum(int(s.get("tests")) for s in root.iter("testsuite")) == 14


def test_perturbed_interleaved_token_fails_with_its_index(scenario):
    out, tmp = scenario("perturb")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "C interleaved == solo: differs at token 3" in out.stdout
    assert "first differing token at index 3" in out.stdout and "top-2 margin" in out.stdout
    assert out.stdout.count("[    FAIL     ]") == 1  # only C was touched
    failure = ET.parse(tmp / "perturb.xml").getroot().find(".//testcase[@name='C interleaved == solo']/failure")
    assert failure is not None and "token 3" in failure.get("message")
    data = json.loads((tmp / "perturb.json").read_text())
    c, solo = data["raw"]["interleaved"]["C"]["token_ids"], data["raw"]["solo"]["C"]["token_ids"]
    assert c[3] != solo[3] and c[:3] == solo[:3]
    assert data["report"]["exit_code"] == 1


def test_an_engine_that_never_yields_fails_the_give_way_as_not_exercised(scenario):
    out, _ = scenario("no-yield")
    assert out.returncode == 1, out.stdout + out.stderr
    # A loaded machine can see D's READ_START late and send E after D's read: not exercised either way.
    assert (
        "[NOT EXERCISED] interleave: D gives way to E: D was read to its end without giving way" in out.stdout
        or "[NOT EXERCISED] interleave: D gives way to E: E was sent after D's read had ended" in out.stdout
    ), out.stdout
    assert "C interleaved == solo: 16 tokens equal" in out.stdout  # the text itself was fine
    assert "--lacks give-way" in out.stdout  # says how an engine built without give-way declares it


def test_give_way_declared_absent_is_not_applicable_and_the_gate_passes(scenario):
    out, tmp = scenario("no-yield-declared")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "declared absent: give-way" in out.stdout
    assert "[NOT APPLICABLE] interleave: D gives way to E: the engine is declared to have no give-way" in out.stdout
    assert "E interleaved == solo: 16 tokens equal" in out.stdout
    suite = ET.parse(tmp / "declared.xml").getroot().find("testsuite")
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"


def test_an_unknown_declared_behaviour_is_a_usage_error():
    out = verify("interleave", "--url", "http://127.0.0.1:9", "--lacks", "give_way")
    assert out.returncode == 2 and "unknown behaviour(s) 'give_way'; known: give-way, pieces, events" in out.stderr


def test_an_engine_that_dies_mid_run_exits_2_with_its_stderr(scenario):
    out, tmp = scenario("die")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "COULD NOT RUN" in out.stdout and "engine exited with status" in out.stdout
    assert "illegal memory access" in out.stdout  # the engine's last stderr lines
    error = ET.parse(tmp / "die.xml").getroot().find(".//testcase/error")
    assert error is not None and "illegal memory access" in error.text


def test_an_engine_that_cannot_start_exits_2_with_its_stderr(scenario):
    out, _ = scenario("fail-start")
    assert out.returncode == 2
    assert "exited with status 3 before it was healthy" in out.stdout and "cannot load model weights" in out.stdout


def test_determinism_fails_when_the_second_run_differs(scenario):
    out, tmp = scenario("drift")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[    FAIL     ] determinism: p4 same in every run: run 1 and run 2 differ at token 5" in out.stdout
    assert out.stdout.count("[    PASS     ] determinism:") == 5
    assert (tmp / "starts").read_text() == "2"  # two fresh engines


def test_determinism_manifest_save_then_against(scenario):
    (saved, same, other, data), _ = scenario("manifest")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert len(data["answers"]) == 6 and data["environment"]["engine"]["version"] == "fake-1"
    for answer in data["answers"]:  # the six hashes are printed
        assert answer["sha256"] in saved.stdout
    assert same.returncode == 0, same.stdout
    assert other.returncode == 1
    for name in ("p1", "p2", "p3", "p4", "p5", "p6"):
        assert f"{name} matches manifest.json: answer to {name} differs from manifest.json" in other.stdout
    assert "first differing token at index 7" in other.stdout


def test_logprobs_must_be_bitwise_where_the_engine_claims_batch_invariance(scenario):
    out, _ = scenario("batch-invariant")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "logprobs interleaved vs solo: the engine claims batch invariance but logprobs differ" in out.stdout
    assert "largest logprob difference 0.001" in out.stdout


def test_builds_side_by_side_name_where_they_differ(scenario):
    out, _ = scenario("builds")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ref: interleave: D gives way to E" in out.stdout and "new: determinism: p6 same in every run" in out.stdout
    assert "builds: p1 same answer (ref vs new): answers differ at token 5" in out.stdout
    assert "builds: C same solo answer (ref vs new): answers differ at token 5" in out.stdout
    assert "[    FAIL     ] new: interleave" not in out.stdout  # each build is consistent with itself


def test_builds_names_the_build_that_could_not_run(scenario):
    out, _ = scenario("builds-broken")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "build 'broken' could not run" in out.stdout and "cannot load model weights" in out.stdout


def test_missing_or_empty_manifest_is_a_failure(tmp_path):
    out = verify("determinism", "--engine", fake(), "--against", str(tmp_path / "nope.json"))
    assert out.returncode == 1 and "does not exist" in out.stdout
    (tmp_path / "empty.json").write_text("")
    out = verify("determinism", "--engine", fake(), "--against", str(tmp_path / "empty.json"))
    assert out.returncode == 1 and "is empty" in out.stdout


def test_bad_build_spec_is_a_usage_error():
    out = verify("builds", "--engine", "env X=1 serve", "--engine", "b=serve")
    assert out.returncode == 2 and "NAME=COMMAND" in out.stderr
