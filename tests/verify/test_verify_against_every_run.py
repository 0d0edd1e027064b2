"""manifest.compare checks every run against the manifest, not only the first, and names the run."""

from __future__ import annotations

from strata_verify import manifest
from strata_verify.client import Completion
from strata_verify.determinism import DeterminismOptions, DeterminismRun, judge
from strata_verify.engine_proc import Target
from strata_verify.report import FAIL, PASS

PROMPTS = (("p1", "one"), ("p2", "two"))
GOOD = {"p1": [1, 2, 3, 4], "p2": [5, 6, 7, 8]}


def run_of(*runs: dict[str, list[int]]) -> DeterminismRun:
    run = DeterminismRun(target=Target(command="engine"), options=DeterminismOptions(tokens=4, prompts=PROMPTS))
    run.runs = [
        {name: Completion(name=name, request_id=name, token_ids=list(ids)) for name, ids in answers.items()}
        for answers in runs
    ]
    run.steps = judge(run)
    return run


def golden(tmp_path):
    path = tmp_path / "m.json"
    manifest.save(manifest.build(run_of(GOOD, GOOD)), path)
    return manifest.load(path)


def test_a_second_run_that_differs_from_the_manifest_fails_and_is_named(tmp_path):
    second = {"p1": [1, 2, 3, 4], "p2": [5, 6, 0, 8]}
    steps = {s.name: s for s in manifest.compare(golden(tmp_path), run_of(GOOD, second), "m.json")}
    assert steps["p1 matches m.json"].status == PASS and "in all 2 runs" in steps["p1 matches m.json"].reason
    bad = steps["p2 matches m.json"]
    assert bad.status == FAIL and bad.reason.endswith("in run 2")
    assert any("first differing token at index 2: run 2 0" in e for e in bad.evidence)


def test_both_runs_differing_names_both(tmp_path):
    other = {"p1": [9, 2, 3, 4], "p2": [5, 6, 7, 8]}
    steps = {s.name: s for s in manifest.compare(golden(tmp_path), run_of(other, other), "m.json")}
    assert steps["p1 matches m.json"].reason.endswith("in run 1 and run 2")


def test_a_prompt_missing_from_one_run_fails(tmp_path):
    steps = {s.name: s for s in manifest.compare(golden(tmp_path), run_of(GOOD, {"p1": [1, 2, 3, 4]}), "m.json")}
    assert steps["p2 matches m.json"].status == FAIL and "missing from run 2" in steps["p2 matches m.json"].reason
