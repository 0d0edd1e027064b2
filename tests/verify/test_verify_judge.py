"""strata_verify.interleave.steps.judge on hand-made evidence: a step passes only when its interleaving is proved."""

from __future__ import annotations

from strata_verify.client import Completion
from strata_verify.engine_proc import Target
from strata_verify.interleave.check import InterleaveOptions, InterleaveRun
from strata_verify.interleave.steps import judge
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS
from strata_verify.requests import InterleavePlan
from strata_bench.engines.feed import EventWatcher

PIECED = {"piped_read_piece": 512, "batch_groups": 2, "vocab_size": 100}
RELEASE = {"piped_read_piece": 0, "batch_groups": 2, "vocab_size": 100}


def answer(name, sent, times, ids=None, cancelled=False):
    ids = ids if ids is not None else [10 + i for i in range(len(times))]
    return Completion(
        name=name,
        request_id=f"verify-interleave-{name}-x",
        sent_at=sent,
        token_ids=list(ids),
        times=list(times),
        logprobs=[-0.5] * len(ids),
        top_logprobs=[None] * len(ids),
        finish_reason=None if cancelled else "length",
        cancelled=cancelled,
    )


def event(index, kind, name, t, **fields):
    return {"index": index, "kind": kind, "t": t, "request_id": f"verify-interleave-{name}-x", "_arrived": t, **fields}


def make_run(info=PIECED, yielded=True, c_pieces=4, events_available=True):
    """A: tokens every 0.1 s from 0.1 to 6 s; C read 1.0-2.0 s; D read 3.0-4.0 s, E sent 3.05 s."""
    run = InterleaveRun(
        target=Target(command="fake"),
        options=InterleaveOptions(plan=InterleavePlan(scale=0.05)),
        info=dict(info),
        nonce="x",
    )
    run.prompts = {"A": [1] * 13, "B": [2] * 16, "C": [3] * 2000, "D": [4] * 2000, "E": [5] * 250}
    decode = [round(0.1 * i, 2) for i in range(1, 61)]
    if c_pieces < 2:  # one run: A and B get nothing while C is read
        decode = [t for t in decode if not 1.0 < t < 2.0]
    run.interleaved = {
        "A": answer("A", 0.0, decode, cancelled=True),
        "B": answer("B", 0.0, decode, cancelled=True),
        "C": answer("C", 0.9, [2.05 + 0.01 * i for i in range(16)]),
        "D": answer("D", 2.9, [4.05 + 0.01 * i for i in range(16)]),
        "E": answer("E", 3.05, [3.5 + 0.01 * i for i in range(16)]),
    }
    run.solo = {k: answer(k, 0.0, v.times, v.token_ids) for k, v in run.interleaved.items()}
    # S, seeded: sampled 0.5-0.8 s beside A and B; alone twice; S and E again not streamed
    s_ids, tops = [20 + i for i in range(4)], [{"x": -0.1}, None, None, None]  # token 0 drew off the argmax
    run.prompts["S"] = [6] * 48
    run.sampled = {
        "interleaved": answer("S", 0.45, [0.5, 0.6, 0.7, 0.8], s_ids),
        "solo": answer("S", 0.0, [0.1] * 4, s_ids),
        "solo again": answer("S", 0.0, [0.1] * 4, s_ids),
    }
    for sampled in run.sampled.values():
        sampled.ended_at, sampled.top_logprobs = sampled.times[-1], list(tops)
    run.whole = {"S": answer("S", 0.0, [0.1] * 4, s_ids), "E": answer("E", 0.0, [0.1] * 16, run.solo["E"].token_ids)}
    w = EventWatcher("http://unused")
    w.available = events_available
    evs = [event(0, "READ_START", "C", 1.0)]
    evs += [
        event(1 + i, "PIECE", "C", 1.0 + (i + 1) * 1.0 / c_pieces, tokens=512, decode_steps=4) for i in range(c_pieces)
    ]
    evs += [
        event(20, "READ_DONE", "C", 2.0),
        event(21, "READ_START", "D", 3.0),
        event(22, "PIECE", "D", 3.3, tokens=512),
    ]
    if yielded:
        evs.append(event(23, "YIELDED", "D", 3.31, slot=2, tokens_read=512, to="verify-interleave-E-x"))
    evs += [
        event(24, "READ_START", "E", 3.32),
        event(25, "READ_DONE", "E", 3.5 if yielded else 4.2),
        event(26, "READ_DONE", "D", 4.0),
    ]
    w.events = evs if events_available else []
    run.watcher = w
    return run


def by_name(steps):
    return {s.name: s for s in steps}


def test_everything_proved_passes():
    steps = by_name(judge(make_run()))
    assert steps["A and B decode"].status == PASS
    c = steps["C read while A and B decode"]
    assert c.status == PASS and "4 pieces" in c.reason
    d = steps["D gives way to E"]
    assert d.status == PASS and "512 tokens" in d.reason and any("YIELDED 2 512" in e for e in d.evidence)
    assert all(steps[f"{n} interleaved == solo"].status == PASS for n in "ABCDE")
    assert steps["logprobs interleaved vs solo"].status == INFO
    for name in (
        "S seeded: interleaved == solo",
        "S seeded: run 1 == run 2",
        "S stream == non-stream",
        "E stream == non-stream",
    ):
        assert steps[name].status == PASS, steps[name]


def test_seeded_sampling_not_beside_a_and_b_is_not_exercised_and_a_difference_fails():
    run = make_run()
    run.sampled["interleaved"].times = [6.5, 6.6, 6.7, 6.8]  # after A and B's last tokens
    run.sampled["interleaved"].ended_at = 6.8
    steps = by_name(judge(run))
    assert steps["S seeded: interleaved == solo"].status == NOT_EXERCISED
    run.sampled["solo again"].token_ids[2] += 1
    run.whole["E"].text = "changed"
    steps = by_name(judge(run))
    assert steps["S seeded: run 1 == run 2"].status == FAIL and "at token 2" in steps["S seeded: run 1 == run 2"].reason
    assert steps["E stream == non-stream"].status == FAIL and "text differs" in steps["E stream == non-stream"].reason


def sampled_at(run, times):
    """S's interleaved answer at `times` (its solo answers the same ids; token 0 drew off the argmax)."""
    ids, tops = [20 + i for i in range(len(times))], [{"x": -0.1}] + [None] * (len(times) - 1)
    run.sampled = {
        "interleaved": answer("S", times[0] - 0.1, times, ids),
        "solo": answer("S", 0.0, [0.1] * len(ids), ids),
        "solo again": answer("S", 0.0, [0.1] * len(ids), ids),
    }
    for sampled in run.sampled.values():
        sampled.ended_at, sampled.top_logprobs = sampled.times[-1], list(tops)
    run.whole["S"] = answer("S", 0.0, [0.1] * len(ids), ids)


def test_seeded_sampling_in_a_burst_is_not_beside_a_and_b():
    """S's answer written at once (a starved front end): one token each to A and B while the client parses it
    is not S decoded beside them; a quarter of S's tokens each is."""
    run = make_run()
    sampled_at(run, [5.0 + i * 0.001 for i in range(32)])  # 32 tokens within 32 ms
    for name in ("A", "B"):
        run.interleaved[name] = answer(name, 0.0, [0.1 * i for i in range(1, 50)] + [5.01, 5.1, 5.2], cancelled=True)
    step = by_name(judge(run))["S seeded: interleaved == solo"]
    assert step.status == NOT_EXERCISED and "burst" in " ".join(step.evidence), step
    sampled_at(run, [5.0 + i * 0.1 for i in range(32)])  # a decode step each, A and B beside them
    for name in ("A", "B"):
        run.interleaved[name] = answer(name, 0.0, [0.1 * i for i in range(1, 90)], cancelled=True)
    assert by_name(judge(run))["S seeded: interleaved == solo"].status == PASS


def test_no_yield_is_not_exercised():
    d = by_name(judge(make_run(yielded=False)))["D gives way to E"]
    assert d.status == NOT_EXERCISED and "without giving way" in d.reason


def test_one_piece_when_the_engine_has_pieces_is_not_exercised():
    c = by_name(judge(make_run(c_pieces=1)))["C read while A and B decode"]
    assert c.status == NOT_EXERCISED and "1 piece" in c.reason


def test_release_engine_passes_c_on_slots_held_but_says_so():
    c = by_name(judge(make_run(info=RELEASE, c_pieces=1)))["C read while A and B decode"]
    assert c.status == PASS and "one run" in c.reason
    assert any("longest pause during C's read: A 1.000 s" in e for e in c.evidence)


def test_decoders_that_stopped_before_the_read_ended_are_not_exercised():
    run = make_run()
    run.interleaved["A"] = answer("A", 0.0, [0.1, 0.2, 0.3])  # finished long before C's read
    assert by_name(judge(run))["C read while A and B decode"].status == NOT_EXERCISED


def test_without_an_event_feed_the_give_way_is_judged_on_the_clients_clock():
    steps = by_name(judge(make_run(info={"vocab_size": 100}, events_available=False)))
    give_way = steps["D gives way to E"]
    assert give_way.status == PASS and "before D's" in give_way.reason  # E sent after D, answered before D
    assert any("client's clock" in line for line in give_way.evidence)
    assert steps["C read while A and B decode"].status == PASS  # A and B got tokens between C's send and first token
    waited = make_run(info={"vocab_size": 100}, events_available=False)
    waited.interleaved["E"] = answer("E", 3.05, [4.5 + 0.01 * i for i in range(16)])  # E waited for D's read
    step = by_name(judge(waited))["D gives way to E"]
    assert step.status == NOT_EXERCISED and "waited for D's whole read" in step.reason


def test_a_server_that_runs_one_request_at_a_time_is_not_exercised_with_that_reason():
    run = make_run(info={"vocab_size": 100}, events_available=False)
    run.one_at_a_time = "the server has one slot (runs one request at a time)"
    steps = judge(run)
    assert steps and all(s.status == NOT_EXERCISED and "one request at a time" in s.reason for s in steps)


def test_without_token_ids_equality_is_on_text():
    run = make_run()
    for side in (run.interleaved, run.solo):
        side["C"] = Completion(
            name="C",
            request_id="c",
            sent_at=0.9,
            text="def f(x):\n    return x",
            times=[2.1] * 5,
            finish_reason="length",
        )
    assert by_name(judge(run))["C interleaved == solo"].status == PASS
    run.solo["C"].text = "def f(y):\n    return y"
    step = by_name(judge(run))["C interleaved == solo"]
    assert step.status == FAIL and "character 6" in step.reason


def test_a_perturbed_token_fails_with_its_index():
    run = make_run()
    run.interleaved["C"].token_ids[3] += 1
    c = by_name(judge(run))["C interleaved == solo"]
    assert c.status == FAIL and "token 3" in c.reason and "index 3" in c.evidence[0]


def test_batch_invariance_claim_makes_logprobs_bitwise():
    run = make_run(info={**PIECED, "batch_invariant": True})
    assert by_name(judge(run))["logprobs interleaved vs solo"].status == PASS
    run.interleaved["E"].logprobs[2] = -0.5000001
    step = by_name(judge(run))["logprobs interleaved vs solo"]
    assert step.status == FAIL and "E" in step.reason and "1e-07" in step.reason
