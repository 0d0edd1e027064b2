"""The checks the field's own tests make, judged from an `InterleaveRun`: seeded sampling and stream == non-stream.

- **S seeded: interleaved == solo.** S (temperature > 0, top-p, a seed) was sampled while A and B decoded; alone on
  a fresh engine it must sample the same tokens. Exercised when A and B were decoding across S's decoding (from
  S's first token to its end) and got tokens during it (the client's clock: they decode until the gate cancels them), and when the sampling drew off
  the argmax at least once (else a server that ignores temperature would pass it as greedy).
- **S seeded: run 1 == run 2.** S alone twice on one engine: the seed, not the engine's state, decides the draw.
- **X stream == non-stream** (S, sampled; E, greedy): the same request, not streamed, gives the same token ids,
  text and finish reason; logprobs bitwise where the engine claims batch invariance.

A token difference always fails, whatever was or was not exercised.
"""

from __future__ import annotations

from typing import Any

from strata_bench.engines.compare import first_difference
from strata_verify.diverge import logprob_delta
from strata_verify.report import FAIL, NOT_EXERCISED, PASS, Step
from strata_verify.requests import SAMPLED

CHECK = "interleave"
SAMPLED_ATTEMPTS = 3  # S sent beside A and B at most, while the client's clock cannot show it beside them
INTERLEAVED = f"{SAMPLED} seeded: interleaved == solo"
RUNS = f"{SAMPLED} seeded: run 1 == run 2"


def stream_step_name(name: str) -> str:
    return f"{name} stream == non-stream"


STEP_NAMES = (INTERLEAVED, RUNS, stream_step_name(SAMPLED), stream_step_name("E"))


def judge_sampled(run: Any) -> list[Step]:
    """The four steps; `run` is an InterleaveRun whose phases both ran."""
    sampling = run.options.sampling.describe()
    inter, solo, again = (run.sampled.get(k) for k in ("interleaved", "solo", "solo again"))
    drawn = _off_argmax(inter, solo, again)
    steps = []

    diff = difference("interleaved", inter, "solo", solo)
    evidence = [
        f"S: {len(run.prompts.get(SAMPLED, ()))} prompt tokens, {sampling}",
        *(diff[1] if diff else ()),
        drawn[1],
    ]
    shown, how = _beside_a_and_b(run, inter)
    evidence.append(how)
    if getattr(run, "sampled_attempts", 1) > 1:
        evidence.append(
            f"attempt {run.sampled_attempts}: the earlier S draw(s) were not shown beside A and B on the client's "
            "clock, so S was sent again"
        )
    if diff is not None:
        steps.append(Step(CHECK, INTERLEAVED, FAIL, diff[0], tuple(evidence)))
    elif not shown:
        steps.append(
            Step(CHECK, INTERLEAVED, NOT_EXERCISED, "S was not shown to be sampled beside A and B", tuple(evidence))
        )
    elif drawn[0] is False:
        steps.append(
            Step(
                CHECK,
                INTERLEAVED,
                NOT_EXERCISED,
                "every sampled token was the argmax: the sampling was not shown (does the server ignore temperature?)",
                tuple(evidence),
            )
        )
    else:
        steps.append(
            Step(
                CHECK,
                INTERLEAVED,
                PASS,
                f"{len(inter.token_ids or inter.text)} sampled tokens equal "
                "(sampled beside A and B, then alone on a fresh engine)",
                tuple(evidence),
            )
        )

    diff = difference("run 1", solo, "run 2", again)
    evidence = [f"{sampling}; both alone on one engine, one after the other", *(diff[1] if diff else ()), drawn[1]]
    if diff is not None:
        steps.append(Step(CHECK, RUNS, FAIL, diff[0], tuple(evidence)))
    elif drawn[0] is False:
        steps.append(
            Step(
                CHECK,
                RUNS,
                NOT_EXERCISED,
                "every sampled token was the argmax: the sampling was not shown",
                tuple(evidence),
            )
        )
    else:
        steps.append(
            Step(CHECK, RUNS, PASS, f"{len(solo.token_ids or solo.text)} sampled tokens equal", tuple(evidence))
        )

    for name, streamed, what in ((SAMPLED, solo, f"seeded, {sampling}"), ("E", run.solo.get("E"), "greedy")):
        steps.append(_stream_step(run, name, streamed, run.whole.get(name), what))
    return steps


def _stream_step(run: Any, name: str, streamed, whole, what: str) -> Step:
    step = stream_step_name(name)
    evidence = [f"{name} ({what}) alone, streamed then not streamed, on one engine"]
    diff = difference("streamed", streamed, "not streamed", whole)
    if diff is not None:
        return Step(CHECK, step, FAIL, diff[0], (*evidence, *diff[1]))
    if streamed.finish_reason != whole.finish_reason:
        return Step(
            CHECK,
            step,
            FAIL,
            f"finish reason differs: streamed {streamed.finish_reason!r}, not streamed {whole.finish_reason!r}",
            tuple(evidence),
        )
    delta = logprob_delta(streamed, whole)
    if delta.compared:
        evidence.append(
            f"logprobs: {delta.compared} positions, {delta.differing} not bitwise equal, largest "
            f"|difference| {delta.largest:.3g}" + (f" (token {delta.index})" if delta.differing else "")
        )
        if run.info.get("batch_invariant") is True and not delta.bitwise_equal:
            return Step(
                CHECK,
                step,
                FAIL,
                f"the engine claims batch invariance but the logprobs differ: largest "
                f"{delta.largest:.3g} at token {delta.index}",
                tuple(evidence),
            )
    else:
        evidence.append("no logprobs on both sides: not compared")
    count = f"{len(streamed.token_ids)} token ids" if streamed.ids_given and whole.ids_given else "the text"
    return Step(CHECK, step, PASS, f"{count}, text and finish reason equal", tuple(evidence))


def difference(left_name: str, left, right_name: str, right) -> tuple[str, list[str]] | None:
    """None when both answers have the same token ids (where both give ids) and the same text; else the reason
    and evidence naming the request, the first differing index and both sides' tokens and logprobs."""
    if left is None or right is None:
        return f"{left_name if left is None else right_name} is missing", []
    rid = f"request {left.name} ({left_name} {left.request_id}, {right_name} {right.request_id})"
    if left.ids_given and right.ids_given:
        index = first_difference(left.token_ids, right.token_ids)
        if index is not None:
            return (
                f"token ids differ at token {index}",
                [
                    f"{rid}: {left_name} has {len(left.token_ids)} tokens, {right_name} {len(right.token_ids)}",
                    f"at token {index}: {left_name} {_token(left, index)}, {right_name} {_token(right, index)}",
                    f"{left_name} tokens {index}..: {left.token_ids[index : index + 8]}",
                    f"{right_name} tokens {index}..: {right.token_ids[index : index + 8]}",
                ],
            )
    elif not (left.text or right.text):
        return "no tokens to compare (neither token ids nor text)", [rid]
    index = first_difference(left.text, right.text)
    if index is not None:
        same_ids = " (the token ids are equal)" if left.ids_given and right.ids_given else ""
        return (
            f"text differs at character {index}{same_ids}",
            [
                rid,
                f"{left_name}: {left.text[index : index + 40]!r}",
                f"{right_name}: {right.text[index : index + 40]!r}",
            ],
        )
    return None


def _token(answer, index: int) -> str:
    if index >= len(answer.token_ids):
        return "(none: the answer ended)"
    lp = answer.logprobs[index] if index < len(answer.logprobs) else None
    return f"{answer.token_ids[index]}" + (f" (logprob {lp:.6g})" if isinstance(lp, (int, float)) else "")


def _off_argmax(*answers) -> tuple[bool | None, str]:
    """(whether some sampled token was not its position's top-1, evidence); None when no logprobs show it."""
    seen = off = 0
    for answer in answers:
        if answer is None:
            continue
        for lp, top in zip(answer.logprobs, answer.top_logprobs):
            values = [v for v in (top or {}).values() if isinstance(v, (int, float))]
            if not isinstance(lp, (int, float)) or not values:
                continue
            seen += 1
            off += lp < max(values)
    if not seen:
        return None, "the server gave no top logprobs: whether the sampling drew off the argmax is not shown"
    return off > 0, f"{off} of {seen} sampled positions drew a token other than the top-1 (top logprobs)"


BESIDE_SHARE = 4  # A and B must each get a token for every 4 of S's while S streams, or S was not shown beside them


def beside_need(s) -> int:
    """Tokens A and B must each receive between S's first token and its end: a quarter of S's (at least 1).
    Decoded in the same steps, each gets about as many as S; one token each is what a burst can look like (a
    starved front end writes S's answer at once and the client's threads interleave while it is parsed)."""
    return max(1, len(s.times) // BESIDE_SHARE)


def decoded_beside(s, a, b) -> bool:
    """While A and B still stream: both got `beside_need(s)` tokens between S's first token and its end, and
    neither ended before S did (the check sends S again where this is False, up to SAMPLED_ATTEMPTS)."""
    if s.first_token_at is None or s.ended_at is None:
        return False
    return all(
        x.tokens_between(s.first_token_at, s.ended_at) >= beside_need(s)
        and (x.ended_at is None or x.ended_at >= s.ended_at)
        for x in (a, b)
    )


def _beside_a_and_b(run: Any, s) -> tuple[bool, str]:
    """S was sampled beside A and B: both open across S's whole request, and both got `beside_need(s)` tokens
    during it."""
    a, b = run.interleaved.get("A"), run.interleaved.get("B")
    if s is None or a is None or b is None or s.first_token_at is None or s.ended_at is None:
        return False, "S, A or B is missing"
    start, end = s.first_token_at, s.ended_at
    got = {n: x.tokens_between(start, end) for n, x in (("A", a), ("B", b))}
    open_through = {
        n: (x.first_token_at is not None and x.first_token_at <= start and (x.cancelled or (x.ended_at or 0) >= end))
        for n, x in (("A", a), ("B", b))
    }
    how = (
        f"S's first token {run.rel(start)}, its end {run.rel(end)}; tokens A and B received meanwhile: A {got['A']}, B "
        f"{got['B']} (the client's clock; A and B decode until the gate cancels them)"
    )
    if not all(open_through.values()):
        return False, how + "; " + " and ".join(
            n for n, ok in open_through.items() if not ok
        ) + " not decoding across S"
    if not (got["A"] >= beside_need(s) and got["B"] >= beside_need(s)):
        return False, how + f"; fewer than {beside_need(s)} each (a quarter of S's {len(s.times)}): S came in a burst"
    return True, how
