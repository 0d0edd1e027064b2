"""The determinism check: six fixed prompts, greedy, each answered twice, each time by a fresh engine.

An answer's hash is SHA-256 over its generated token ids written as ASCII decimals joined by commas
(`answer_hash`). Every prompt must hash the same in both runs; no answers, or an empty answer, fails.
With `--url` both runs go to the one server (the report says it was not fresh).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from strata_verify.client import Completion, EngineClient, GateError
from strata_verify.diverge import NEAR_TIE, compare_answers
from strata_verify.engine_proc import Target
from strata_verify.report import FAIL, PASS, Step
from strata_verify.requests import DETERMINISM_PROMPTS, request_id

CHECK = "determinism"


def answer_hash(token_ids: list[int]) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in token_ids).encode("ascii")).hexdigest()


@dataclass(frozen=True)
class DeterminismOptions:
    tokens: int = 64  # generated per answer
    runs: int = 2
    near_tie: float = NEAR_TIE
    request_timeout: float = 600.0
    prompts: tuple[tuple[str, str], ...] = DETERMINISM_PROMPTS

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"--tokens must be >= 1, got {self.tokens}")
        if self.runs < 2:
            raise ValueError(f"determinism needs at least 2 runs, got {self.runs}")
        if not self.prompts:
            raise ValueError("determinism needs at least one prompt")
        names = [name for name, _ in self.prompts]
        if len(set(names)) != len(names):
            raise ValueError(f"prompt names must be unique, got {names}")


@dataclass
class DeterminismRun:
    target: Target
    options: DeterminismOptions
    info: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Completion]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def hashes(self, run_index: int = 0) -> dict[str, str]:
        return {name: answer_hash(c.token_ids) for name, c in self.runs[run_index].items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.describe(),
            "engine": self.info,
            "tokens": self.options.tokens,
            "runs": [
                {
                    name: {"sha256": answer_hash(c.token_ids), "token_ids": c.token_ids, "text": c.text}
                    for name, c in run.items()
                }
                for run in self.runs
            ],
        }


def run_determinism(target: Target, options: DeterminismOptions) -> DeterminismRun:
    run = DeterminismRun(target=target, options=options)
    for index in range(options.runs):
        with target.launch() as launch:
            client = EngineClient(launch.url, options.request_timeout)
            info = client.prepare()
            run.info = run.info or info
            answers = {}
            for name, prompt in options.prompts:
                answer = client.complete(name, request_id("det", name, f"run{index + 1}"), prompt, options.tokens)
                if answer.error:
                    raise GateError(f"determinism: run {index + 1}, prompt {name} failed: {answer.error}")
                answers[name] = answer
            run.runs.append(answers)
    run.steps = judge(run)
    return run


def judge(run: DeterminismRun) -> list[Step]:
    build = run.target.name if run.target.name != "engine" else None
    fresh = "each run on a fresh engine" if run.target.fresh else "both runs on the same server (--url: not fresh)"
    steps = []
    first = run.runs[0] if run.runs else {}
    if not first:
        return [Step(CHECK, "answers", FAIL, "zero answers: nothing was checked", build=build)]
    for name, prompt in run.options.prompts:
        answers = [r.get(name) for r in run.runs]
        if any(a is None or not a.token_ids for a in answers):
            counts = [0 if a is None else len(a.token_ids) for a in answers]
            steps.append(
                Step(CHECK, f"{name} same in every run", FAIL, f"empty answer (tokens per run: {counts})", build=build)
            )
            continue
        hashes = [answer_hash(a.token_ids) for a in answers]
        evidence = [
            f"prompt {prompt!r}",
            *(f"run {i + 1}: sha256 {h} ({len(a.token_ids)} tokens)" for i, (h, a) in enumerate(zip(hashes, answers))),
        ]
        if len(set(hashes)) == 1:
            evidence.append(fresh)
            steps.append(Step(CHECK, f"{name} same in every run", PASS, f"sha256 {hashes[0]}", tuple(evidence), build))
            continue
        bad = next(i for i, h in enumerate(hashes) if h != hashes[0])
        diff = compare_answers(
            left_name="run 1",
            left=answers[0],
            right_name=f"run {bad + 1}",
            right=answers[bad],
            near_tie=run.options.near_tie,
        )
        evidence.append(diff.describe())
        steps.append(
            Step(
                CHECK,
                f"{name} same in every run",
                FAIL,
                f"run 1 and run {bad + 1} differ at token {diff.index}",
                tuple(evidence),
                build,
            )
        )
    return steps
