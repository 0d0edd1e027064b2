"""The independent answers: a file that cannot be compared is refused; judging names request and phase."""

from __future__ import annotations

import json

import pytest

from strata_verify import independent
from strata_verify.answers import AnswersOptions, AnswersRun, judge
from strata_verify.client import Completion
from strata_verify.determinism import answer_hash
from strata_verify.engine_proc import Target
from strata_verify.manifest import ManifestError
from strata_verify.report import FAIL, INFO, PASS


def reference_file(tmp_path, **overrides):
    ids = independent.prompt_ids("L1", 40, 258, 257, attempt=2)
    answer = {
        "name": "L1",
        "prompt_tokens": 40,
        "attempt": 2,
        "prompt_sha256": answer_hash(ids),
        "token_ids": [5, 6, 7],
        "sha256": answer_hash([5, 6, 7]),
        "tokens": 3,
        "logprobs": [-0.1, -0.2, -0.3],
        "top_ids": [[[5, -0.1], [9, -2.0]], [[6, -0.2], [9, -2.0]], [[7, -0.3], [8, -2.0]]],
    }
    answer.update(overrides.pop("answer", {}))
    data = {
        "format": independent.FORMAT,
        "made_by": {
            "implementation": "transformers x",
            "dtype": "float64",
            "method": "one forward",
            "weights_sha256": "ab" * 32,
        },
        "vocab_size": 258,
        "eos_token_id": 257,
        "max_tokens": 3,
        "answers": [answer],
        **overrides,
    }
    path = tmp_path / "ind.json"
    path.write_text(json.dumps(data))
    return path


def test_load_rebuilds_prompts_from_their_seed(tmp_path):
    data, expected = independent.load(reference_file(tmp_path))
    assert expected[0].prompt == independent.prompt_ids("L1", 40, 258, 257, attempt=2)
    assert expected[0].token_ids == [5, 6, 7] and "float64" in independent.made_by(data)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"format": "other/1"}, "is not a strata-verify-independent/1 file"),
        ({"answers": []}, "zero answers"),
        ({"max_tokens": 0}, "positive integers"),
        ({"answer": {"sha256": "0" * 64}}, "do not match its tokens/sha256"),
        ({"answer": {"prompt_sha256": "0" * 64}}, "rebuilt from its seed hashes differently"),
        ({"answer": {"token_ids": None}}, "lacks name, prompt_tokens or token_ids"),
    ],
)
def test_unusable_files_are_refused_with_the_reason(tmp_path, change, message):
    with pytest.raises(ManifestError, match=message):
        independent.load(reference_file(tmp_path, **change))


def test_missing_and_non_json_files_are_refused(tmp_path):
    with pytest.raises(ManifestError, match="do not exist"):
        independent.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ManifestError, match="not JSON"):
        independent.load(tmp_path / "bad.json")


def make_run(tmp_path, solo, together, events=None):
    data, expected = independent.load(reference_file(tmp_path))
    run = AnswersRun(Target(command="engine"), AnswersOptions(), data, expected, events=events)

    def answer(phase, ids):
        texts = [f"t{t}" for t in ids]
        return Completion(
            name="L1",
            request_id=f"verify-{phase}-L1-x",
            token_ids=ids,
            logprobs=[-0.1, -0.2, -0.3],
            top_logprobs=[{f"t{t}": lp, "z": -5.0} for t, lp in zip(ids, [-0.1, -0.2, -0.3])],
            token_texts=texts,
            times=[1.0, 2.0, 3.0],
        )

    run.answers = {"solo": {"L1": answer("solo", solo)}, "together": {"L1": answer("together", together)}}
    return run


def test_equal_answers_pass_and_a_wrong_one_names_request_phase_and_index(tmp_path):
    steps = {s.name: s for s in judge(make_run(tmp_path, [5, 6, 7], [5, 6, 4]))}
    assert steps["L1 solo == independent"].status == PASS
    bad = steps["L1 together == independent"]
    assert bad.status == FAIL and bad.check == "answers"
    assert bad.reason.startswith("request L1 differs from the independent answer at token 2")
    assert any("transformers x, float64" in e for e in bad.evidence)
    assert steps["resume offsets"].status == INFO  # no event feed


def test_together_reports_give_way_and_checks_resume(tmp_path):
    rid = "verify-together-L1-x"
    events = [
        {"index": 0, "kind": "PIECE", "request_id": rid, "tokens": 16, "tokens_read": 16, "_arrived": 0.5},
        {"index": 1, "kind": "YIELDED", "request_id": rid, "tokens_read": 16, "to": "S", "_arrived": 0.6},
        {"index": 2, "kind": "RESUME", "request_id": rid, "tokens_read": 32, "_arrived": 0.9},
    ]
    steps = {s.name: s for s in judge(make_run(tmp_path, [5, 6, 7], [5, 6, 7], events))}
    assert (
        steps["together: how the reads went"].status == INFO
        and "1 give-way" in steps["together: how the reads went"].reason
    )
    assert steps["resume offsets"].status == FAIL and "request L1" in steps["resume offsets"].reason


def test_same_tokens_from_other_numbers_fail_the_logprob_step(tmp_path):
    run = make_run(tmp_path, [5, 6, 7], [5, 6, 7])
    steps = {s.name: s for s in judge(run)}
    assert steps["L1 solo logprobs ~ independent"].status == PASS
    run.answers["solo"]["L1"].logprobs = [-0.1, -0.2 + 0.02, -0.3]  # a boundary bug that keeps the greedy token
    steps = {s.name: s for s in judge(run)}
    bad = steps["L1 solo logprobs ~ independent"]
    assert bad.status == FAIL and bad.reason.startswith("request L1: the same tokens from other numbers")
    assert "at token 1" in bad.reason and "0.02" in bad.reason
    assert steps["L1 solo == independent"].status == PASS


def test_the_cli_refuses_a_missing_independent_file_and_a_bad_tolerance(tmp_path):
    from .support import verify

    out = verify("answers", "--against", str(tmp_path / "nope.json"), "--junit", str(tmp_path / "a.xml"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "answers: against nope.json: independent answers" in out.stdout and "do not exist" in out.stdout
    assert (tmp_path / "a.xml").exists()
    bad = verify("answers", "--logprob-tol", "0")
    assert bad.returncode == 2 and "--logprob-tol" in bad.stderr
