"""`strata-verify needle` against the synthetic engine: a needle among fillers answers as alone; a bug at a
batch size, or logprobs that move with the batch on an engine claiming invariance, fail naming the request."""

from __future__ import annotations

import json

from strata_verify.needle import batch_sizes

from .support import fake, verify

SMALL = ("--filler-tokens", "200", "--tokens", "8", "--seed", "11")


def _steps(path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads(path.read_text())["report"]["steps"]}


def test_the_sizes_straddle_the_row_tile_the_group_and_the_batch():
    assert batch_sizes({"family": "strata", "batch": 6, "batch_groups": 2, "row_tile": 4}) == (2, 3, 4, 5, 6)
    assert batch_sizes({"family": "vllm", "batch": 8, "server": {}}) == (2, 3, 4, 5, 7, 8)
    assert batch_sizes({"family": "x", "batch": None, "server": {}}) == (2, 3, 4, 5)


def test_a_right_engine_passes_and_the_seed_is_shown(tmp_path):
    out = verify("needle", "--engine", fake(), *SMALL, "--json", str(tmp_path / "n.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    steps = _steps(tmp_path / "n.json")
    assert {f"needle among {n} == solo" for n in (2, 3, 4)} <= set(steps)  # the fake: batch 4 in 2 groups
    assert "seed: 11" in out.stdout and "place " in steps["needle among 4 == solo"]["reason"]


def test_a_bug_at_one_batch_size_fails_that_size_only_naming_the_request_and_token(tmp_path):
    out = verify("needle", "--engine", fake("--batch-fault", "4"), *SMALL, "--json", str(tmp_path / "n.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    steps = _steps(tmp_path / "n.json")
    assert steps["needle among 3 == solo"]["status"] == "pass"
    failed = steps["needle among 4 == solo"]
    assert failed["status"] == "fail" and "verify-needle-needle-in4at" in failed["reason"], failed
    assert "at token 2" in failed["reason"]


def test_logprobs_that_move_with_the_batch_fail_where_the_engine_claims_invariance():
    out = verify("needle", "--engine", fake("--batch-invariant", "--logprob-jitter", "0.001"), *SMALL, "--sizes", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[    FAIL     ] needle: needle among 2: logprobs vs solo" in out.stdout
    assert "[    PASS     ] needle: needle among 2 == solo" in out.stdout


def test_bad_sizes_are_a_usage_error():
    bad = verify("needle", "--sizes", "1,4")
    assert bad.returncode == 2 and "--sizes must each be >= 2" in bad.stderr
    bad = verify("needle", "--sizes", "four")
    assert bad.returncode == 2 and "not comma-separated integers" in bad.stderr
