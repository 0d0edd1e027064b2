"""Two (or more) builds side by side, as a gate: the checks for each, then their answers compared.

The first build is the reference. Determinism answers must hash the same across builds; interleave
answers, solo and interleaved, must have the same token ids (A and B over the tokens both builds
generated, since they decode until the gate stops them); with independent answers, every build must
match them. A step a build is documented not to take (the release's give-way: it reads each prompt
in one pipelined run) is reported as info for that build instead of failing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata_verify.answers import AnswersRun, run_answers
from strata_verify.determinism import DeterminismOptions, DeterminismRun, answer_hash, run_determinism
from strata_verify.diverge import compare_answers
from strata_verify.engine_proc import Target
from strata_verify.interleave.check import InterleaveOptions, InterleaveRun, run_interleave
from strata_verify.interleave.steps import engine_has_pieces
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Step
from strata_verify.requests import NAMES

CHECK = "builds"


@dataclass
class BuildsRun:
    interleave: dict[str, InterleaveRun] = field(default_factory=dict)
    determinism: dict[str, DeterminismRun] = field(default_factory=dict)
    answers: dict[str, AnswersRun] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interleave": {k: v.to_dict() for k, v in self.interleave.items()},
            "determinism": {k: v.to_dict() for k, v in self.determinism.items()},
            "answers": {k: v.to_dict() for k, v in self.answers.items()},
        }


def run_builds(
    targets: list[Target],
    interleave: InterleaveOptions | None,
    determinism: DeterminismOptions | None,
    on_step=None,
    answers: tuple | None = None,
) -> BuildsRun:
    """Run the chosen checks for every build, then compare each build with the first.

    `answers` is (independent file metadata, expected answers, AnswersOptions), or None to skip."""
    if len(targets) < 2:
        raise ValueError("builds needs at least two --engine NAME=COMMAND")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"build names must be unique, got {names}")
    out = BuildsRun()
    for target in targets:
        if interleave is not None:
            run = out.interleave[target.name] = run_interleave(target, interleave)
            run.steps = [documented_not_taken(step, run.info) for step in run.steps]
            _emit(out, run.steps, on_step)
        if determinism is not None:
            out.determinism[target.name] = run_determinism(target, determinism)
            _emit(out, out.determinism[target.name].steps, on_step)
        if answers is not None:
            out.answers[target.name] = run_answers(target, *answers)
            _emit(out, out.answers[target.name].steps, on_step)
    ref = targets[0].name
    for target in targets[1:]:
        pair = f"{ref} vs {target.name}"
        if determinism is not None:
            _emit(out, _compare_determinism(out.determinism[ref], out.determinism[target.name], pair), on_step)
        if interleave is not None:
            for phase in ("solo", "interleaved"):
                _emit(out, _compare_interleave(out.interleave[ref], out.interleave[target.name], pair, phase), on_step)
    return out


GIVE_WAY = "D gives way to E"


def documented_not_taken(step: Step, info: dict[str, Any]) -> Step:
    """The give-way step of a build that reads each prompt in one pipelined run (groups > 1, no piece
    size: the release) is info, not a failure: that build is documented never to give way."""
    one_run = engine_has_pieces(info) is False and int(info.get("batch_groups") or 1) > 1
    if step.name != GIVE_WAY or step.status != NOT_EXERCISED or not one_run:
        return step
    return Step(
        step.check,
        step.name,
        INFO,
        "not taken by this build: it reads each prompt in one pipelined run "
        "(batch_groups > 1, no piece size), which never gives way (docs/VERIFY.md); " + step.reason,
        step.evidence,
        step.build,
    )


def _emit(out: BuildsRun, steps: list[Step], on_step) -> None:
    out.steps.extend(steps)
    if on_step is not None:
        for step in steps:
            on_step(step)


def _compare_determinism(left: DeterminismRun, right: DeterminismRun, pair: str) -> list[Step]:
    steps = []
    for name, _ in left.options.prompts:
        a, b = left.runs[0].get(name), right.runs[0].get(name)
        if a is None or b is None or not a.token_ids or not b.token_ids:
            steps.append(Step(CHECK, f"{name} same answer ({pair})", FAIL, "an answer is missing or empty"))
            continue
        ha, hb = answer_hash(a.token_ids), answer_hash(b.token_ids)
        evidence = (f"{left.target.name}: sha256 {ha}", f"{right.target.name}: sha256 {hb}")
        if ha == hb:
            steps.append(Step(CHECK, f"{name} same answer ({pair})", PASS, f"sha256 {ha}", evidence))
            continue
        diff = compare_answers(left_name=left.target.name, left=a, right_name=right.target.name, right=b)
        steps.append(
            Step(
                CHECK,
                f"{name} same answer ({pair})",
                FAIL,
                f"answers differ at token {diff.index}",
                evidence + (diff.describe(),),
            )
        )
    return steps


class _Prefix:
    def __init__(self, answer, length: int):
        self.token_ids = answer.token_ids[:length]
        self.logprobs = answer.logprobs[:length]
        self.top_logprobs = answer.top_logprobs[:length]
        self.token_texts = answer.token_texts[:length]


def _compare_interleave(left: InterleaveRun, right: InterleaveRun, pair: str, phase: str) -> list[Step]:
    """Each request's `phase` ("solo" or "interleaved") answer in both builds."""
    steps = []
    if left.prompts != right.prompts:
        return [
            Step(
                CHECK,
                f"interleave {phase} answers ({pair})",
                FAIL,
                "the builds got different prompts (different vocab_size or eos id): answers not comparable",
            )
        ]
    for name in NAMES:
        a, b = getattr(left, phase)[name], getattr(right, phase)[name]
        length = (
            min(len(a.token_ids), len(b.token_ids)) if name in ("A", "B") else max(len(a.token_ids), len(b.token_ids))
        )
        diff = compare_answers(
            left_name=left.target.name, left=_Prefix(a, length), right_name=right.target.name, right=_Prefix(b, length)
        )
        if diff is None:
            steps.append(Step(CHECK, f"{name} same {phase} answer ({pair})", PASS, f"{length} tokens equal"))
        else:
            steps.append(
                Step(
                    CHECK,
                    f"{name} same {phase} answer ({pair})",
                    FAIL,
                    f"answers differ at token {diff.index}",
                    (diff.describe(),),
                )
            )
    return steps
