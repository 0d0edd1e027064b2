"""The interleave check, judged: each step's verdict from the evidence an `InterleaveRun` gathered.

A step passes only when the engine's events (or, for servers without them, token arrival times on the
client's clock) show that its interleaving happened; otherwise it is NOT_EXERCISED, which fails the gate.
A server that runs one request at a time makes every step NOT_EXERCISED, with that reason. A step for a
behaviour the run declares the engine to lack (`--lacks`, behaviours.py) is NOT_APPLICABLE instead. Token equality
is judged per request on token ids, or on text where the server gives no ids; logprobs are compared
bitwise only where the engine claims batch invariance, and their largest difference is always reported.
"""

from __future__ import annotations

from typing import Any

from strata_bench.engines.compare import first_difference
from strata_verify.behaviours import apply_declaration
from strata_verify.diverge import compare_answers, logprob_delta
from strata_verify.interleave.run import InterleaveRun
from strata_verify.interleave.sampled import STEP_NAMES as FIELD_STEP_NAMES, judge_sampled
from strata_verify.read_trace import place_to_look, resume_step
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Step
from strata_verify.requests import NAMES

CHECK = "interleave"


STEP_NAMES = ("A and B decode", "C read while A and B decode", "D gives way to E")


def judge(run: InterleaveRun) -> list[Step]:
    build = run.target.name if run.target.name != "engine" else None
    if run.one_at_a_time is not None:
        names = [*STEP_NAMES, *(f"{name} interleaved == solo" for name in NAMES), *FIELD_STEP_NAMES]
        evidence = (*run.concurrency, *((run.cache,) if run.cache else ()))
        return apply_declaration(
            [Step(CHECK, name, NOT_EXERCISED, run.one_at_a_time, evidence, build) for name in names], run.options.lacks
        )
    steps = [_decoders(run), _read_during_decode(run), _give_way(run)]
    steps += [_equal(run, name) for name in NAMES]
    feed = run.watcher.events if run.watcher is not None and run.watcher.available else None
    steps.append(resume_step(CHECK, feed, {name: run.interleaved[name].request_id for name in NAMES}))
    steps.append(_logprobs(run))
    steps += judge_sampled(run)  # the field's checks: seeded sampling, stream == non-stream (sampled.py)
    return apply_declaration(
        [Step(CHECK, s.name, s.status, s.reason, s.evidence, build) for s in steps], run.options.lacks
    )


def engine_has_pieces(info: dict[str, Any]) -> bool | None:
    """True/False from GET /v1/engine; None for an engine that does not say."""
    if "piped_read_piece" not in info:
        return None
    return bool(info.get("piped_read_piece")) and int(info.get("batch_groups") or 1) > 1


def _pieces(run: InterleaveRun, rid: str) -> list[dict[str, Any]]:
    return run.watcher.of(rid, "PIECE") if run.watcher else []


def _when(run: InterleaveRun, event: dict[str, Any] | None) -> float | None:
    """When the gate saw an event (its arrival on the live feed), else its engine time mapped over."""
    if event is None or run.watcher is None:
        return None
    return event["_arrived"] if event.get("_arrived") is not None else run.watcher.to_client(event)


def _read_window(run: InterleaveRun, name: str) -> tuple[float | None, float | None, str]:
    """When `name`'s prompt was read, on the gate's clock: engine READ_START..READ_DONE when the feed
    has them, else from its send to its first token (which includes any wait for a slot)."""
    rid = run.interleaved[name].request_id
    w = run.watcher
    if w is not None and w.available:
        done = w.of(rid, "READ_DONE")
        start, end = _when(run, next(iter(w.of(rid, "READ_START")), None)), _when(run, done[-1] if done else None)
        if start is not None and end is not None:
            return start, end, "engine READ_START..READ_DONE"
    answer = run.interleaved[name]
    return answer.sent_at, answer.first_token_at, f"{name}'s send..{name}'s first token"


def longest_pause(answer, start: float, end: float) -> float:
    """The longest gap between two of a stream's tokens that overlaps [start, end] (seconds)."""
    longest = 0.0
    for before, after in zip(answer.times, answer.times[1:]):
        if after >= start and before <= end:
            longest = max(longest, after - before)
    return longest


def _decoders(run: InterleaveRun) -> Step:
    a, b, c = (run.interleaved[n] for n in "ABC")
    evidence = [
        f"A: first token {run.rel(a.first_token_at)}, B: first token {run.rel(b.first_token_at)}; "
        f"C sent {run.rel(c.sent_at)}",
        *run.concurrency,
    ]
    if a.first_token_at is None or b.first_token_at is None:
        return Step(CHECK, "A and B decode", NOT_EXERCISED, "A or B produced no token", tuple(evidence))
    if max(a.first_token_at, b.first_token_at) > c.sent_at:
        return Step(
            CHECK, "A and B decode", NOT_EXERCISED, "A or B was not decoding yet when C was sent", tuple(evidence)
        )
    return Step(CHECK, "A and B decode", PASS, "both decoding before C was sent", tuple(evidence))


def _active_through(answer, end: float) -> bool:
    """Still decoding at `end`: cancelled by the gate after C-E, or its last token came after `end`."""
    return answer.cancelled or (bool(answer.times) and answer.times[-1] >= end)


def _read_during_decode(run: InterleaveRun) -> Step:
    name = "C read while A and B decode"
    start, end, source = _read_window(run, "C")
    if start is None or end is None:
        return Step(CHECK, name, NOT_EXERCISED, "C's read window is unknown (no first token)")
    a, b = run.interleaved["A"], run.interleaved["B"]
    pieces = _pieces(run, run.interleaved["C"].request_id)
    has_pieces = engine_has_pieces(run.info)
    evidence = [
        f"C's read ({source}): {run.rel(start)} .. {run.rel(end)}, {end - start:.3f} s, "
        f"{len(run.prompts['C'])} prompt tokens",
        f"longest pause during C's read: A {longest_pause(a, start, end):.3f} s, B {longest_pause(b, start, end):.3f} s",
    ]
    # Tokens made just before READ_START can reach the gate after it; counting from the end of the
    # first piece leaves them out, so what is counted was decoded between pieces.
    first_piece_end = _when(run, pieces[0]) if pieces else None
    since, since_what = (first_piece_end, "C's first PIECE event") if first_piece_end else (start, "C's read began")
    until = "its READ_DONE" if source.startswith("engine") else "C's first token (the client's clock)"
    got_a, got_b = a.tokens_between(since, end), b.tokens_between(since, end)
    evidence.append(f"tokens received from {since_what} to {until}: A {got_a}, B {got_b}")
    if pieces:
        sizes = "+".join(str(p.get("tokens", "?")) for p in pieces)
        steps = ", ".join(str(p.get("decode_steps", "?")) for p in pieces)
        evidence.append(
            f"C read in {len(pieces)} pieces (PIECE events): {sizes} tokens; decode steps after each: {steps}"
        )
    elif run.watcher is not None and run.watcher.available:
        evidence.append("no PIECE events for C (read in one run)")
    else:
        evidence.append("the engine has no event feed (GET /v1/events): judged from token arrival times only")
    lost = [n for n, ans in (("A", a), ("B", b)) if not _active_through(ans, end)]
    if lost:
        return Step(
            CHECK, name, NOT_EXERCISED, f"{' and '.join(lost)} stopped decoding before C's read ended", tuple(evidence)
        )
    if has_pieces:
        if len(pieces) < 2:
            return Step(
                CHECK,
                name,
                NOT_EXERCISED,
                f"the engine reads in pieces of {run.info.get('piped_read_piece')} "
                f"tokens but C's read went in {len(pieces)} piece(s): raise --scale or lower the piece size",
                tuple(evidence),
            )
        if got_a == 0 or got_b == 0:
            return Step(
                CHECK, name, NOT_EXERCISED, "C was read in pieces but A or B got no token between them", tuple(evidence)
            )
        return Step(
            CHECK,
            name,
            PASS,
            f"C read in {len(pieces)} pieces while A and B got {got_a} and {got_b} tokens",
            tuple(evidence),
        )
    if has_pieces is False:
        evidence.append(
            "the engine reads each prompt in one run (GET /v1/engine: no piece size), so A and B "
            "wait for the read; they held their slots and decoded before and after it"
        )
        return Step(
            CHECK, name, PASS, "C was read while A and B held decoding slots (one run, no pieces)", tuple(evidence)
        )
    if got_a == 0 and got_b == 0:
        return Step(CHECK, name, NOT_EXERCISED, "A and B got no token during C's read", tuple(evidence))
    return Step(CHECK, name, PASS, f"A and B got {got_a} and {got_b} tokens during C's read", tuple(evidence))


def _give_way(run: InterleaveRun) -> Step:
    name = "D gives way to E"
    d, e = run.interleaved["D"], run.interleaved["E"]
    w = run.watcher
    evidence = [f"prompts: D {len(run.prompts['D'])} tokens, E {len(run.prompts['E'])} (under half of D's)"]
    if w is None or not w.available:
        return _give_way_seen_from_outside(run, name, evidence)
    start, end, source = _read_window(run, "D")
    evidence.append(
        f"D's read ({source}): {run.rel(start)} .. {run.rel(end)}; E sent {run.rel(e.sent_at)}; "
        f"E's first token {run.rel(e.first_token_at)}, D's first token {run.rel(d.first_token_at)}"
    )
    pieces = _pieces(run, d.request_id)
    if pieces:
        evidence.append(f"D read in {len(pieces)} pieces: " + "+".join(str(p.get("tokens", "?")) for p in pieces))
    yields = [
        y
        for y in w.of(None, "YIELDED")
        if d.request_id in (y.get("request_id"), y.get("parked"))
        or (y.get("request_id") is None and y.get("to") == e.request_id)
    ]
    for y in yields:
        evidence.append(
            f"YIELDED {y.get('slot')} {y.get('tokens_read')} (to {y.get('to', '?')}) at {run.rel(_when(run, y))}"
        )
    if start is not None and e.sent_at < start:
        evidence.append("E was sent before D's read began (the engine had not reported READ_START for D in time)")
    if not yields:
        if end is not None and e.sent_at > end:
            return Step(
                CHECK, name, NOT_EXERCISED, "E was sent after D's read had ended; no give-way possible", tuple(evidence)
            )
        return Step(
            CHECK,
            name,
            NOT_EXERCISED,
            "D was read to its end without giving way (no YIELDED event for D)",
            tuple(evidence),
        )
    to_e = [y for y in yields if y.get("to") in (None, e.request_id)]
    if not to_e:
        return Step(CHECK, name, NOT_EXERCISED, f"D gave way to {yields[0].get('to')}, not to E", tuple(evidence))
    e_done = w.of(e.request_id, "READ_DONE")
    e_ready = _when(run, e_done[0]) if e_done else e.first_token_at
    d_ready = end if end is not None else d.first_token_at
    if e_ready is None or d_ready is None or e_ready > d_ready:
        return Step(
            CHECK, name, NOT_EXERCISED, "D logged YIELDED but E's read did not finish before D's", tuple(evidence)
        )
    return Step(
        CHECK,
        name,
        PASS,
        f"D gave way at {to_e[0].get('tokens_read')} tokens; E was read while D waited",
        tuple(evidence),
    )


def _give_way_seen_from_outside(run: InterleaveRun, name: str, evidence: list[str]) -> Step:
    return give_way_from_outside(CHECK, name, run.interleaved["D"], run.interleaved["E"], run.rel, evidence)


def give_way_from_outside(check: str, name: str, long, short, rel, evidence: list[str]) -> Step:
    """Without an event feed: `short`, sent after `long`, got its first token before `long` did (the
    client's clock). `rel` writes a client-clock time for the evidence. The cache check uses it too."""
    d, e, dn, en = long, short, long.name, short.name
    evidence.append("the server has no event feed (GET /v1/events): judged on the client's clock")
    evidence.append(
        f"{dn} sent {rel(d.sent_at)}, {en} sent {rel(e.sent_at)}; {en}'s first token "
        f"{rel(e.first_token_at)}, {dn}'s first token {rel(d.first_token_at)}"
    )
    if d.first_token_at is None or e.first_token_at is None:
        return Step(check, name, NOT_EXERCISED, f"{dn} or {en} produced no token", tuple(evidence))
    if e.sent_at < d.sent_at:
        return Step(check, name, NOT_EXERCISED, f"{en} was sent before {dn}", tuple(evidence))
    if e.sent_at >= d.first_token_at:
        return Step(
            check,
            name,
            NOT_EXERCISED,
            f"{en} was sent after {dn}'s read had ended; no give-way possible",
            tuple(evidence),
        )
    if e.first_token_at < d.first_token_at:
        return Step(
            check,
            name,
            PASS,
            f"{en}'s first token came {d.first_token_at - e.first_token_at:.3f} s before "
            f"{dn}'s: {en} was read while {dn}'s read was under way (the give-way seen from outside)",
            tuple(evidence),
        )
    return Step(
        check,
        name,
        NOT_EXERCISED,
        f"{en}'s first token came after {dn}'s: {en} waited for {dn}'s whole read",
        tuple(evidence),
    )


def _equal(run: InterleaveRun, name: str) -> Step:
    inter, solo = run.interleaved[name], run.solo[name]
    step = f"{name} interleaved == solo"
    if not inter.ids_given and not solo.ids_given:  # a server that gives no ids: compare the text
        if not inter.text or not solo.text:
            return Step(CHECK, step, FAIL, "no text to compare (the server gave neither token ids nor text)")
        length = min(len(inter.text), len(solo.text)) if name in ("A", "B") else max(len(inter.text), len(solo.text))
        index = first_difference(inter.text[:length], solo.text[:length])
        if index is None:
            return Step(CHECK, step, PASS, f"{length} characters of text equal (the server gives no token ids)")
        return Step(
            CHECK,
            step,
            FAIL,
            f"text differs at character {index}",
            (f"interleaved: {inter.text[index : index + 40]!r}", f"solo: {solo.text[index : index + 40]!r}"),
        )
    if not inter.token_ids or not solo.token_ids:
        return Step(
            CHECK, step, FAIL, f"no tokens to compare (interleaved {len(inter.token_ids)}, solo {len(solo.token_ids)})"
        )
    diff = compare_answers(
        left_name="interleaved", left=inter, right_name="solo", right=solo, near_tie=run.options.near_tie
    )
    if diff is None:
        return Step(CHECK, step, PASS, f"{len(inter.token_ids)} tokens equal")
    evidence = [
        f"request {name} ({inter.request_id}): {diff.describe()}",
        f"interleaved tokens {diff.index}..: {inter.token_ids[diff.index : diff.index + 8]}",
        f"solo tokens {diff.index}..: {solo.token_ids[diff.index : diff.index + 8]}",
    ]
    if run.watcher is not None and run.watcher.available:
        evidence.append(place_to_look(run.watcher.events, _at(inter.times, diff.index), run.watcher.to_client, run.rel))
    label = {"near-tie": " (near-tie)", "wrong token": f" (wrong token: {', '.join(diff.wrong)})"}.get(diff.kind, "")
    return Step(CHECK, step, FAIL, f"differs at token {diff.index}{label}", tuple(evidence))


def _at(times: list[float], index: int) -> float | None:
    return times[index] if 0 <= index < len(times) else None


def _logprobs(run: InterleaveRun) -> Step:
    step = "logprobs interleaved vs solo"
    deltas = {name: logprob_delta(run.interleaved[name], run.solo[name]) for name in NAMES}
    compared = {n: d for n, d in deltas.items() if d.compared}
    if not compared:
        return Step(CHECK, step, INFO, "the engine returned no logprobs: nothing compared")
    worst = max(compared, key=lambda n: compared[n].largest)
    largest = compared[worst]
    evidence = [
        f"{n}: {d.compared} positions, {d.differing} not bitwise equal, largest |difference| {d.largest:.3g}"
        for n, d in compared.items()
    ]
    summary = f"largest logprob difference {largest.largest:.3g} (request {worst}, token {largest.index})"
    if run.info.get("batch_invariant") is True:
        differing = [n for n, d in compared.items() if not d.bitwise_equal]
        if differing:
            return Step(
                CHECK,
                step,
                FAIL,
                f"the engine claims batch invariance but logprobs differ in {', '.join(differing)}: {summary}",
                tuple(evidence),
            )
        return Step(CHECK, step, PASS, "bitwise equal (the engine claims batch invariance)", tuple(evidence))
    return Step(
        CHECK,
        step,
        INFO,
        f"{summary}; not required bitwise (the engine does not claim batch invariance)",
        tuple(evidence),
    )
