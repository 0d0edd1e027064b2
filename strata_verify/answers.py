"""The independent-answer check: long prompts whose expected greedy tokens were made outside the
build under test (`independent.py`), compared with the engine's answers in every way the check runs it.

Two phases, each on a fresh engine: **solo** (each prompt alone) and **together** (the longest, L1,
starts its read, then S and L2 join it, so an engine that reads in pieces gives L1's read way to S, resumes it, and
reads L2 while L1 and S decode). Every answer must equal the independent one token for token; the
resumed reads must start where they gave way. What the engine did together is reported as info.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from strata_verify.client import Completion, EngineClient, GateError, StreamTask
from strata_verify.diverge import NEAR_TIE, compare_answers, logprob_delta
from strata_verify.engine_proc import Target
from strata_verify.independent import Expected, made_by
from strata_verify.read_trace import place_to_look, resume_step
from strata_verify.report import FAIL, INFO, PASS, Step
from strata_verify.requests import request_id
from strata_bench.engines.feed import EventWatcher

CHECK = "answers"
PHASES = ("solo", "together")
# Strata's float32 layouts sit within ~1e-5 nats of the float64 reference's chosen-token logprobs (the pass line
# gives the margin); a chunk-boundary bug moves them by 1e-2 to several nats, and a compiled step one
# position short of the window by ~1e-3, even where the greedy tokens survive.
LOGPROB_TOL = 1e-4


@dataclass(frozen=True)
class AnswersOptions:
    near_tie: float = NEAR_TIE
    logprob_tol: float = LOGPROB_TOL
    phase_timeout: float = 600.0
    request_timeout: float = 600.0
    label: str = "independent"

    def __post_init__(self) -> None:
        if self.near_tie < 0 or self.phase_timeout <= 0 or not self.logprob_tol > 0:
            raise ValueError("--near-tie must be >= 0, --logprob-tol and the phase timeout > 0")


@dataclass
class AnswersRun:
    target: Target
    options: AnswersOptions
    reference: dict[str, Any]  # the independent answers file's metadata
    expected: list[Expected]
    info: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, dict[str, Completion]] = field(default_factory=dict)  # phase -> name -> answer
    events: list[dict[str, Any]] | None = None  # the together phase's event feed (None: no feed)
    offset: float | None = None  # engine time -> gate clock, for events fetched late
    nonce: str = ""
    t0: float = 0.0
    steps: list[Step] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.describe(),
            "engine": self.info,
            "made_by": self.reference.get("made_by"),
            "answers": {
                phase: {
                    n: {"request_id": c.request_id, "token_ids": c.token_ids, "logprobs": c.logprobs}
                    for n, c in answers.items()
                }
                for phase, answers in self.answers.items()
            },
            "events": [{k: v for k, v in e.items() if k != "_arrived"} for e in self.events or []],
        }


def run_answers(
    target: Target, reference: dict[str, Any], expected: list[Expected], options: AnswersOptions
) -> AnswersRun:
    """Both phases, then the verdict. GateError when an engine cannot start, a prompt cannot fit, or a request fails."""
    run = AnswersRun(target, options, reference, expected, nonce=secrets.token_hex(4))
    tokens = int(reference["max_tokens"])
    with target.launch() as launch:
        client = EngineClient(launch.url, options.request_timeout)
        run.info = client.prepare()
        _fits(run, tokens)
        if run.steps:  # not comparable (another vocabulary): nothing to run
            return run
        run.answers["solo"] = {
            e.name: _ok(client.complete(e.name, request_id("solo", e.name, run.nonce), e.prompt, tokens))
            for e in expected
        }
    with target.launch() as launch:
        client = EngineClient(launch.url, options.request_timeout)
        client.prepare()
        _together(run, client, tokens)
    run.steps = judge(run)
    return run


def _fits(run: AnswersRun, tokens: int) -> None:
    vocab, eos = run.info.get("vocab_size"), run.info.get("eos_token_id")
    ref_vocab, ref_eos = run.reference["vocab_size"], run.reference.get("eos_token_id")
    if vocab is not None and (vocab != ref_vocab or (eos is not None and eos != ref_eos)):
        run.steps = [
            Step(
                CHECK,
                f"against {run.options.label}",
                FAIL,
                f"not comparable: the engine's vocabulary is {vocab} (eos {eos}), the independent answers "
                f"were made for {ref_vocab} (eos {ref_eos}): another model",
            )
        ]
        return
    ctx = run.info.get("ctx")
    longest = max(len(e.prompt) for e in run.expected)
    if ctx and longest + tokens >= ctx:
        raise GateError(
            f"answers: the longest prompt ({longest} tokens) and {tokens} answer tokens do not fit the "
            f"engine's context of {ctx}: start it with a larger --ctx"
        )


def _ok(answer: Completion) -> Completion:
    if answer.error:
        raise GateError(f"answers: request {answer.name} ({answer.request_id}) failed: {answer.error}")
    return answer


def _together(run: AnswersRun, client: EngineClient, tokens: int) -> None:
    watcher = EventWatcher(client.url).start()
    run.t0 = time.monotonic()
    by_name = {e.name: e for e in run.expected}
    # the longest is read first; the others join once its read has begun, the shortest first (it is
    # the one the first read can give way to)
    first = max(run.expected, key=lambda e: len(e.prompt)).name
    order = [first] + [e.name for e in sorted(run.expected, key=lambda e: len(e.prompt)) if e.name != first]
    tasks: dict[str, StreamTask] = {}
    try:

        def start(name: str) -> None:
            rid = request_id("together", name, run.nonce)
            tasks[name] = client.task(name, rid, by_name[name].prompt, tokens).start()

        start(order[0])
        first_id = tasks[order[0]].result.request_id
        deadline = time.monotonic() + min(run.options.phase_timeout, 120.0)
        while watcher.available and time.monotonic() < deadline and not tasks[order[0]].first_token.is_set():
            if watcher.wait_for(
                lambda e: e.get("request_id") == first_id and e.get("kind") in ("READ_START", "PIECE"), 0.2
            ):
                break
        for name in order[1:]:
            start(name)
        for task in tasks.values():
            if not task.finished.wait(run.options.phase_timeout):
                raise GateError(f"answers: {task.result.name} did not finish in {run.options.phase_timeout:.0f} s")
            _ok(task.result)
    finally:
        for task in tasks.values():
            task.cancel()
            task.join(30.0)
        watcher.stop()
    run.answers["together"] = {name: tasks[name].result for name in by_name}
    run.events = watcher.events if watcher.available else None
    run.offset = watcher.offset


def judge(run: AnswersRun) -> list[Step]:
    build = run.target.name if run.target.name != "engine" else None
    steps = [
        step
        for phase in PHASES
        if phase in run.answers
        for e in run.expected
        for step in (_equal(run, phase, e), _close(run, phase, e))
    ]
    if "together" in run.answers:
        ids = {name: c.request_id for name, c in run.answers["together"].items()}
        steps.append(_what_happened(run, ids))
        steps.append(resume_step(CHECK, run.events, ids))
    return [Step(CHECK, s.name, s.status, s.reason, s.evidence, build) for s in steps]


def _equal(run: AnswersRun, phase: str, expected: Expected) -> Step:
    answer = run.answers[phase][expected.name]
    step = f"{expected.name} {phase} == {run.options.label}"
    how = f"expected: {made_by(run.reference)}"
    diff = compare_answers(
        left_name=f"engine ({phase})",
        left=answer,
        right_name=run.options.label,
        right=expected,
        near_tie=run.options.near_tie,
    )
    if diff is None:
        return Step(CHECK, step, PASS, f"{len(answer.token_ids)} tokens equal ({len(expected.prompt)}-token prompt)")
    evidence = [
        f"request {expected.name} ({answer.request_id}), {len(expected.prompt)}-token prompt: {diff.describe()}",
        f"engine tokens {diff.index}..: {answer.token_ids[diff.index : diff.index + 8]}",
        f"{run.options.label} tokens {diff.index}..: {expected.token_ids[diff.index : diff.index + 8]}",
        how,
    ]
    if phase == "together" and run.events is not None:
        when = answer.times[diff.index] if diff.index < len(answer.times) else None
        mapped = (lambda e: e["t"] + run.offset) if run.offset is not None else None
        evidence.append(place_to_look(run.events, when, mapped, lambda t: f"+{t - run.t0:.3f} s"))
    label = {"near-tie": " (near-tie)", "wrong token": f" (wrong token: {', '.join(diff.wrong)})"}.get(diff.kind, "")
    return Step(
        CHECK,
        step,
        FAIL,
        f"request {expected.name} differs from the {run.options.label} answer at token {diff.index}{label}",
        tuple(evidence),
    )


def _close(run: AnswersRun, phase: str, expected: Expected) -> Step:
    """Chosen-token logprobs against the reference's, over the tokens both chose alike."""
    answer, tol = run.answers[phase][expected.name], run.options.logprob_tol
    step = f"{expected.name} {phase} logprobs ~ {run.options.label}"
    delta = logprob_delta(answer, expected)
    if delta.largest is None:
        return Step(CHECK, step, INFO, "no logprobs to compare (the engine returned none, or token 0 differs)")
    where = f"largest |engine - {run.options.label}| {delta.largest:.3g} at token {delta.index} over {delta.compared} tokens"
    if delta.largest <= tol:
        margin = f", {tol / delta.largest:.0f}x the difference" if delta.largest > 0 else ""
        return Step(CHECK, step, PASS, f"{where} (tolerance {tol:g}{margin})")
    return Step(
        CHECK,
        step,
        FAIL,
        f"request {expected.name}: the same tokens from other numbers: {where}, over the tolerance {tol:g}",
        (
            f"request {expected.name} ({answer.request_id}): engine logprob "
            f"{answer.logprobs[delta.index]:.6f}, {run.options.label} {expected.logprobs[delta.index]:.6f}",
        ),
    )


def _what_happened(run: AnswersRun, ids: dict[str, str]) -> Step:
    """Info: how the together phase was read (pieces, give-ways, resumes), from the event feed."""
    if run.events is None:
        return Step(CHECK, "together: how the reads went", INFO, "the engine has no event feed")
    lines, gave_way = [], 0
    for name, rid in ids.items():
        mine = [e for e in run.events if e.get("request_id") == rid]
        pieces = [e for e in mine if e.get("kind") == "PIECE"]
        yields = [e for e in mine if e.get("kind") == "YIELDED"]
        resumes = [e for e in mine if e.get("kind") == "RESUME"]
        gave_way += len(yields)
        lines.append(
            f"{name}: {len(pieces)} pieces, gave way {len(yields)}x"
            + "".join(f" (at {y.get('tokens_read')} to {y.get('to')})" for y in yields)
            + f", resumed {len(resumes)}x"
            + "".join(f" (at {r.get('tokens_read')})" for r in resumes)
        )
    summary = (
        f"{gave_way} give-way(s)"
        if gave_way
        else "no read gave way (an engine that reads each prompt in one run never does)"
    )
    return Step(CHECK, "together: how the reads went", INFO, summary, tuple(lines))
