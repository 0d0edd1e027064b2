"""read_trace: a resumed read must start where it gave way; the event closest before a wrong token."""

from __future__ import annotations

from strata_verify.read_trace import place_to_look, resume_problems, resume_step
from strata_verify.report import FAIL, INFO, PASS


def ev(index, kind, rid="D", arrived=None, **fields):
    return {"index": index, "kind": kind, "request_id": rid, "t": float(index), "_arrived": arrived, **fields}


def parked_read(resume_at: int) -> list[dict]:
    return [
        ev(0, "READ_START", prompt_tokens=2000),
        ev(1, "PIECE", tokens=512, tokens_read=512),
        ev(2, "YIELDED", tokens_read=512, to="E", slot=1),
        ev(3, "READ_START", rid="E"),
        ev(4, "READ_DONE", rid="E"),
        ev(5, "RESUME", tokens_read=resume_at, prompt_tokens=2000),
        ev(6, "PIECE", tokens=512, tokens_read=resume_at + 512),
    ]


def test_resume_where_it_yielded_passes():
    problems, resumes = resume_problems(parked_read(512), "D")
    assert (problems, resumes) == ([], 1)
    step = resume_step("interleave", parked_read(512), {"D": "D", "E": "E"})
    assert step.status == PASS and "1 resumed" in step.reason


def test_resume_one_chunk_too_far_fails_naming_the_request_and_both_offsets():
    step = resume_step("interleave", parked_read(1024), {"C": "C", "D": "D"})
    assert step.status == FAIL and step.reason.startswith("request D:")
    text = "\n".join(step.evidence)
    assert "YIELDED at 512 tokens, then RESUME tokens_read=1024" in text and "512 tokens apart" in text
    assert "PIECE of 512 tokens after 512 read reports tokens_read=1536" in text


def test_events_are_judged_in_feed_order_not_list_order():
    events = list(reversed(parked_read(512)))
    assert resume_problems(events, "D") == ([], 1)


def test_resume_without_yield_and_no_parked_read():
    assert resume_problems([ev(0, "RESUME", tokens_read=0)], "D")[0] == [
        "RESUME tokens_read=0 without a YIELDED before it"
    ]
    assert resume_step("interleave", [ev(0, "PIECE", tokens=512, tokens_read=512)], {"D": "D"}).status == INFO
    assert resume_step("interleave", None, {"D": "D"}).status == INFO


def test_place_to_look_is_the_last_decision_before_the_token():
    events = [
        ev(0, "PIECE", rid="C", arrived=1.0, tokens=512, tokens_read=512),
        ev(1, "FINISH", rid="A", arrived=1.5),  # not a scheduler decision about reads
        ev(2, "YIELDED", rid="D", arrived=2.0, tokens_read=512, to="E"),
        ev(3, "RESUME", rid="D", arrived=3.0, tokens_read=512),
    ]
    text = place_to_look(events, 2.5)
    assert "YIELDED of D" in text and "tokens_read=512" in text and "to=E" in text
    assert "RESUME of D" in place_to_look(events, 3.0)
    assert "no engine event" in place_to_look(events, 0.5)
    assert "unknown" in place_to_look(events, None)


def test_place_to_look_maps_events_without_arrival():
    events = [ev(0, "PIECE", rid="C", tokens=512, tokens_read=512)]
    assert "PIECE of C" in place_to_look(events, 5.0, mapped=lambda e: e["t"] + 1.0)
    assert "no engine event" in place_to_look(events, 0.5, mapped=lambda e: e["t"] + 1.0)
