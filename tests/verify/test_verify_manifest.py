"""manifest: what a release keeps, refusing files that cannot be compared, naming each differing prompt."""

from __future__ import annotations

import json

import pytest

from strata_verify import manifest
from strata_verify.client import Completion
from strata_verify.determinism import DeterminismOptions, DeterminismRun, answer_hash, judge
from strata_verify.engine_proc import Target
from strata_verify.report import FAIL, INFO, PASS

PROMPTS = (("p1", "one"), ("p2", "two"), ("p3", "three"))


def make_run(answers: dict[str, list[int]], runs: int = 2) -> DeterminismRun:
    run = DeterminismRun(
        target=Target(command="engine"),
        options=DeterminismOptions(tokens=4, prompts=PROMPTS),
        info={"device": "cpu", "dtype": "fp32", "model": "tiny", "version": "0.1.0"},
    )
    run.runs = [
        {
            name: Completion(name=name, request_id=name, token_ids=list(ids), prompt_token_ids=[1, 2])
            for name, ids in answers.items()
        }
        for _ in range(runs)
    ]
    run.steps = judge(run)
    return run


def test_answer_hash_is_sha256_of_comma_joined_ids():
    import hashlib

    assert answer_hash([1, 22, 333]) == hashlib.sha256(b"1,22,333").hexdigest()


def test_round_trip_and_match(tmp_path):
    run = make_run({"p1": [1, 2, 3, 4], "p2": [5, 6, 7, 8], "p3": [9, 9, 9, 9]})
    path = tmp_path / "m.json"
    manifest.save(manifest.build(run), path)
    data = manifest.load(path)
    assert data["environment"]["device"] == "cpu" and "packages" in data["environment"]
    assert [a["sha256"] for a in data["answers"]] == [
        answer_hash(ids) for ids in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9])
    ]
    steps = manifest.compare(data, run, "m.json")
    assert [s.status for s in steps] == [PASS, PASS, PASS, INFO]


def test_compare_names_each_differing_prompt_and_its_index(tmp_path):
    path = tmp_path / "m.json"
    manifest.save(manifest.build(make_run({"p1": [1, 2, 3, 4], "p2": [5, 6, 7, 8], "p3": [9, 9, 9, 9]})), path)
    other = make_run({"p1": [1, 2, 3, 4], "p2": [5, 6, 0, 8], "p3": [9, 9, 9, 1]})
    steps = {s.name: s for s in manifest.compare(manifest.load(path), other, "m.json")}
    assert steps["p1 matches m.json"].status == PASS
    assert steps["p2 matches m.json"].status == FAIL and "p2" in steps["p2 matches m.json"].reason
    assert any("index 2" in e for e in steps["p2 matches m.json"].evidence)
    assert any("index 3" in e for e in steps["p3 matches m.json"].evidence)


def test_different_max_tokens_cannot_be_compared(tmp_path):
    path = tmp_path / "m.json"
    data = manifest.build(make_run({"p1": [1, 2, 3, 4], "p2": [5, 6, 7, 8], "p3": [9, 9, 9, 9]}))
    data["max_tokens"] = 64
    manifest.save(data, path)
    steps = manifest.compare(manifest.load(path), make_run({"p1": [1, 2, 3, 4]}), "m.json")
    assert len(steps) == 1 and steps[0].status == FAIL and "--tokens 64" in steps[0].reason


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("{not json", "not JSON"),
        (json.dumps({"format": "other"}), "is not a"),
        (json.dumps({"format": manifest.FORMAT, "max_tokens": 4, "answers": []}), "zero answers"),
        (json.dumps({"format": manifest.FORMAT, "max_tokens": 4, "answers": [{"name": "p1"}]}), "lacks"),
    ],
)
def test_unusable_manifests_are_refused(tmp_path, content, message):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(manifest.ManifestError, match=message):
        manifest.load(path)


def test_determinism_judge_fails_on_difference_and_on_empty_answers():
    run = make_run({"p1": [1, 2, 3, 4], "p2": [5, 6, 7, 8], "p3": [9, 9, 9, 9]})
    run.runs[1]["p2"] = Completion(name="p2", request_id="p2", token_ids=[5, 6, 7, 0])
    run.runs[1]["p3"] = Completion(name="p3", request_id="p3", token_ids=[])
    steps = {s.name: s for s in judge(run)}
    assert steps["p1 same in every run"].status == PASS
    assert steps["p2 same in every run"].status == FAIL and "token 3" in steps["p2 same in every run"].reason
    assert steps["p3 same in every run"].status == FAIL and "empty" in steps["p3 same in every run"].reason
    empty = make_run({})
    assert [s.status for s in judge(empty)] == [FAIL]
