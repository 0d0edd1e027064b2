"""The needle check: one short prompt among long ones, at a random place, in batches around the engine's row
tile and decode buckets, must answer as it does alone.

Contract: on one engine (fresh with --engine), the needle is answered alone first; then, for each batch size n
(`NeedleOptions.sizes`, else `batch_sizes(info)`: around the engine's row tile, its slots per batch group and
its batch), n requests are sent at once: n - 1 fillers (long random prompts, new each batch) and the needle at
a place drawn from `seed`. Each time the needle's greedy tokens must equal its solo tokens (a step per size,
naming the request and the first differing token). Its logprobs must be bitwise equal where the engine claims
batch invariance (`/v1/engine` `batch_invariant`); elsewhere the largest difference is info. The seed is in
the report, so a failure reruns with `--seed`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from strata_verify.client import Completion, EngineClient, GateError
from strata_verify.diverge import NEAR_TIE, compare_answers, logprob_delta
from strata_verify.engine_proc import Target
from strata_verify.report import FAIL, INFO, PASS, Step
from strata_verify.requests import random_prompt, request_id

CHECK = "needle"


@dataclass(frozen=True)
class NeedleOptions:
    seed: int = 0
    sizes: tuple[int, ...] = ()  # batch sizes; () = batch_sizes(the engine's facts)
    needle_tokens: int = 48  # the needle's prompt
    filler_tokens: int = 600  # each filler's prompt
    tokens: int = 16  # generated per request
    near_tie: float = NEAR_TIE
    request_timeout: float = 600.0

    def __post_init__(self) -> None:
        if any(n < 2 for n in self.sizes):
            raise ValueError(f"--sizes must each be >= 2 (the needle and a filler at least), got {list(self.sizes)}")
        if self.needle_tokens < 1 or self.filler_tokens < 1 or self.tokens < 1:
            raise ValueError("--needle-tokens, --filler-tokens and --tokens must be >= 1")


def batch_sizes(info: dict[str, Any]) -> tuple[int, ...]:
    """Batches that straddle the boundaries where an engine's kernels change shape: its row tile (padded rows),
    its slots per batch group (a decode micro-batch) and its batch, one under, at and one over each, and 2..5;
    capped at the batch (at 5 where the engine says none)."""
    batch, tile, groups = (int(_fact(info, key) or 0) for key in ("batch", "row_tile", "batch_groups"))
    groups = max(groups, 1)
    marks = [m for m in (tile, batch // groups if batch and groups > 1 else 0, batch) if m and m > 1]
    sizes = {n for m in marks for n in (m - 1, m, m + 1)} | {2, 3, 4, 5}
    cap = batch if batch > 1 else 5
    return tuple(sorted(n for n in sizes if 2 <= n <= cap))


def _fact(info: dict[str, Any], key: str) -> Any:
    """A fact of /v1/engine (Strata's, at the top) or of another server's engine endpoint."""
    value = info.get(key)
    return value if value is not None else (info.get("server") or {}).get(key)


@dataclass
class NeedleRun:
    target: Target
    options: NeedleOptions
    info: dict[str, Any] = field(default_factory=dict)
    solo: Completion | None = None
    batches: list[tuple[int, int, Completion]] = field(default_factory=list)  # (size, needle's place, needle)
    steps: list[Step] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.describe(),
            "engine": self.info,
            "seed": self.options.seed,
            "solo": self.solo.token_ids if self.solo else None,
            "batches": [{"size": n, "place": at, "token_ids": c.token_ids} for n, at, c in self.batches],
        }


def run_needle(target: Target, options: NeedleOptions) -> NeedleRun:
    """The solo answer, then every batch; GateError when the engine cannot start or a request fails."""
    run = NeedleRun(target=target, options=options)
    rng = random.Random(options.seed)
    with target.launch() as launch:
        client = EngineClient(launch.url, options.request_timeout)
        run.info = client.prepare()
        vocab, eos = run.info.get("vocab_size"), run.info.get("eos_token_id")
        if not vocab:
            raise GateError("needle: the server says no vocabulary size, so no random prompt can be made for it")
        needle = random_prompt(f"needle|{options.seed}", options.needle_tokens, vocab, eos)
        run.solo = _checked(client.complete("needle", request_id("needle", "needle", "solo"), needle, options.tokens))
        for n in options.sizes or batch_sizes(run.info):
            place = rng.randrange(n)
            tasks = []
            for i in range(n):
                if i == place:
                    tasks.append(
                        client.task("needle", request_id("needle", "needle", f"in{n}at{i}"), needle, options.tokens)
                    )
                else:
                    filler = random_prompt(f"filler|{options.seed}|{n}|{i}", options.filler_tokens, vocab, eos)
                    tasks.append(
                        client.task(f"filler{i}", request_id("needle", f"filler{i}", f"in{n}"), filler, options.tokens)
                    )
            for task in tasks:
                task.start()
            answers = [_checked(task.join(options.request_timeout)) for task in tasks]
            run.batches.append((n, place, answers[place]))
    run.steps = judge(run)
    return run


def _checked(answer: Completion) -> Completion:
    if answer.error:
        raise GateError(f"needle: request {answer.request_id} failed: {answer.error}")
    return answer


def judge(run: NeedleRun) -> list[Step]:
    return [
        step for n, place, answer in run.batches for step in (_equal(run, n, place, answer), _close(run, n, answer))
    ]


def _equal(run: NeedleRun, n: int, place: int, answer: Completion) -> Step:
    step = f"needle among {n} == solo"
    where = (
        f"place {place + 1} of {n} (seed {run.options.seed}), {run.options.needle_tokens}-token needle among "
        f"{run.options.filler_tokens}-token fillers"
    )
    diff = compare_answers(
        left_name=f"among {n}", left=answer, right_name="solo", right=run.solo, near_tie=run.options.near_tie
    )
    if diff is None:
        return Step(CHECK, step, PASS, f"{len(answer.token_ids)} tokens equal at {where}")
    return Step(
        CHECK,
        step,
        FAIL,
        f"request {answer.request_id} differs from the needle alone at token {diff.index}",
        (
            f"{where}: {diff.describe()}",
            f"among {n}, tokens {diff.index}..: {answer.token_ids[diff.index : diff.index + 8]}",
            f"alone, tokens {diff.index}..: {run.solo.token_ids[diff.index : diff.index + 8]}",
        ),
    )


def _close(run: NeedleRun, n: int, answer: Completion) -> Step:
    step = f"needle among {n}: logprobs vs solo"
    delta = logprob_delta(answer, run.solo)
    if not delta.compared:
        return Step(CHECK, step, INFO, "no logprobs to compare (the engine returned none, or token 0 differs)")
    summary = f"largest |difference| {delta.largest:.3g} at token {delta.index} over {delta.compared} tokens"
    if _fact(run.info, "batch_invariant") is True:
        if not delta.bitwise_equal:
            return Step(
                CHECK,
                step,
                FAIL,
                f"request {answer.request_id}: the engine claims batch invariance but "
                f"the needle's logprobs moved: {summary}",
            )
        return Step(
            CHECK, step, PASS, f"bitwise equal over {delta.compared} tokens (the engine claims batch invariance)"
        )
    return Step(CHECK, step, INFO, f"{summary}; not required bitwise (the engine does not claim batch invariance)")
