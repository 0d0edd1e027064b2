"""builds as a gate: a build is not failed for a step it is documented not to take (the release's
give-way), and everything both builds must agree on is still compared, solo and interleaved."""

from __future__ import annotations

from strata_verify.builds import GIVE_WAY, _compare_interleave, documented_not_taken
from strata_verify.client import Completion
from strata_verify.engine_proc import Target
from strata_verify.interleave.check import InterleaveOptions, InterleaveRun
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Step
from strata_verify.requests import NAMES

RELEASE = {"piped_read_piece": 0, "batch_groups": 2}
PIECES = {"piped_read_piece": 512, "batch_groups": 2}
ONE_GROUP = {"piped_read_piece": 0, "batch_groups": 1}


def give_way(status=NOT_EXERCISED):
    return Step("interleave", GIVE_WAY, status, "D was read to its end without giving way (no YIELDED event for D)")


def test_the_release_give_way_is_info_not_a_failure():
    step = documented_not_taken(give_way(), RELEASE)
    assert step.status == INFO and "not taken by this build" in step.reason and "no YIELDED" in step.reason


def test_engines_that_should_give_way_still_fail():
    for info in (
        PIECES,
        ONE_GROUP,
        {},
    ):  # pieces, one group (gives way at chunk boundaries), an engine that does not say
        assert documented_not_taken(give_way(), info).status == NOT_EXERCISED


def test_other_steps_are_untouched():
    other = Step("interleave", "C interleaved == solo", FAIL, "differs at token 3")
    assert documented_not_taken(other, RELEASE) is other
    assert documented_not_taken(give_way(PASS), RELEASE).status == PASS


def run_with(name: str, solo: dict[str, list[int]], interleaved: dict[str, list[int]]) -> InterleaveRun:
    run = InterleaveRun(
        target=Target(name=name, command="x"), options=InterleaveOptions(), prompts={n: [1] for n in NAMES}
    )
    run.solo = {n: Completion(name=n, request_id=n, token_ids=ids) for n, ids in solo.items()}
    run.interleaved = {n: Completion(name=n, request_id=n, token_ids=ids) for n, ids in interleaved.items()}
    return run


def test_interleaved_answers_are_compared_across_builds_too():
    same = {n: [1, 2, 3] for n in NAMES}
    other = {**same, "D": [1, 9, 3], "A": [1, 2, 3, 4, 5]}  # A decodes longer: compared over the common tokens
    left, right = run_with("release", same, same), run_with("pieces", same, other)
    solo = {s.name: s for s in _compare_interleave(left, right, "release vs pieces", "solo")}
    inter = {s.name: s for s in _compare_interleave(left, right, "release vs pieces", "interleaved")}
    assert all(s.status == PASS for s in solo.values())
    assert inter["D same interleaved answer (release vs pieces)"].status == FAIL
    assert inter["A same interleaved answer (release vs pieces)"].status == PASS
