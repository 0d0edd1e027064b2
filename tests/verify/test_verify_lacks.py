"""Declaring behaviours absent (`--lacks`): their steps become not applicable, equality never does; the default
stays the spec's (a missing give-way fails, naming give-way and how to declare it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from strata_verify import junit
from strata_verify.behaviours import apply_declaration, parse_lacks
from strata_verify.interleave.check import InterleaveOptions
from strata_verify.interleave.steps import judge
from strata_verify.report import EXIT_FAIL, EXIT_OK, FAIL, INFO, NOT_APPLICABLE, NOT_EXERCISED, PASS, Report, Step
from strata_verify.requests import InterleavePlan

from .test_verify_judge import by_name, make_run


def declared(run, lacks):
    run.options = replace(run.options, lacks=parse_lacks(lacks))
    return run


def test_parse_lacks_names_and_errors():
    assert parse_lacks("give-way, Pieces,") == {"give-way", "pieces"}
    assert parse_lacks(None) == parse_lacks("") == frozenset()
    assert parse_lacks(["events"]) == {"events"}
    with pytest.raises(ValueError, match="unknown behaviour.*'giveway'.*known: give-way, pieces, events"):
        parse_lacks("giveway")
    with pytest.raises(ValueError, match="unknown behaviour"):
        InterleaveOptions(plan=InterleavePlan(scale=0.05), lacks="yield")


def test_default_missing_give_way_fails_naming_it_and_the_declaration():
    steps = by_name(judge(make_run(yielded=False)))
    step = steps["D gives way to E"]
    assert step.status == NOT_EXERCISED
    assert any("--lacks give-way" in line for line in step.evidence)
    report = Report(steps=list(steps.values()))
    assert report.exit_code == EXIT_FAIL


def test_declared_give_way_is_not_applicable_and_the_rest_passes():
    steps = judge(declared(make_run(yielded=False), "give-way"))
    give_way = by_name(steps)["D gives way to E"]
    assert give_way.status == NOT_APPLICABLE and "declared to have no give-way (--lacks give-way)" in give_way.reason
    assert Report(steps=steps).exit_code == EXIT_OK
    assert "1 not applicable" in Report(steps=steps).render_text()


def test_equality_failure_fails_whatever_is_declared():
    run = declared(make_run(yielded=False), "give-way,pieces,events")
    run.solo["C"] = replace(run.solo["C"], token_ids=[99] + run.solo["C"].token_ids[1:])
    steps = by_name(judge(run))
    assert steps["C interleaved == solo"].status == FAIL
    assert Report(steps=list(steps.values())).exit_code == EXIT_FAIL


def blocked_run():
    """An engine without pieces and without a feed: A and B get nothing between C's send and its first token."""
    run = make_run(info={"vocab_size": 100}, c_pieces=1, events_available=False)
    c = run.interleaved["C"]
    run.interleaved["C"] = replace(c, sent_at=1.01, times=[1.99 + 0.001 * i for i in range(len(c.times))])
    return run


def test_declared_pieces_when_c_blocked_the_decoders():
    plain = by_name(judge(blocked_run()))
    assert plain["C read while A and B decode"].status == NOT_EXERCISED
    steps = by_name(judge(declared(blocked_run(), "pieces")))
    assert steps["C read while A and B decode"].status == NOT_APPLICABLE


def test_declared_but_seen_still_passes_and_says_so():
    steps = by_name(judge(declared(make_run(), "give-way")))
    step = steps["D gives way to E"]
    assert step.status == PASS and any("declared absent" in line for line in step.evidence)


def test_declared_events_make_resume_offsets_not_applicable():
    steps = by_name(judge(declared(make_run(events_available=False), "events")))
    assert steps["resume offsets"].status == NOT_APPLICABLE


def test_a_fail_in_a_declared_step_is_never_hidden():
    fail = Step("interleave", "resume offsets", FAIL, "a read resumed at the wrong offset")
    assert apply_declaration([fail], frozenset({"events"})) == [fail]


def test_only_not_applicable_steps_is_never_a_pass():
    report = Report(
        steps=[
            Step("interleave", "D gives way to E", NOT_APPLICABLE, "declared"),
            Step("interleave", "logprobs", INFO, "none"),
        ]
    )
    assert report.exit_code == EXIT_FAIL


def test_junit_marks_not_applicable_as_skipped():
    report = Report(
        steps=[
            Step("interleave", "D gives way to E", NOT_APPLICABLE, "declared"),
            Step("interleave", "A interleaved == solo", PASS, "equal"),
        ]
    )
    xml = junit.to_xml(report)
    assert "<skipped" in xml and 'skipped="1"' in xml and 'failures="0"' in xml
