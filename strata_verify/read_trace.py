"""A request's read, told from the engine's event feed: are resume offsets right, and which engine
event came last before a given token.

`resume_problems(events, request_id)` checks that every `RESUME` of a parked read starts where its
`YIELDED` left it (`YIELDED <slot> 512` then `RESUME tokens_read=512`) and that consecutive `PIECE`s
add up (`tokens_read` = the previous one's + `tokens`). `place_to_look(...)` names the scheduler
event closest before a token's arrival: where to start reading the log when that token is wrong.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from strata_verify.report import FAIL, INFO, PASS, Step

# Scheduler decisions that change what a later token is computed with (a read piece, a give-way, a
# resume, a decode budget, a mixed run, a stop), and the read's ends.
DECISIONS = ("PIECE", "LEADIN", "YIELDED", "RESUME", "MIX", "BSTOP", "READ_START", "READ_DONE")


def _ordered(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The feed's order (its `index`), falling back to the order received."""
    events = list(events)
    return sorted(events, key=lambda e: (e.get("index") is None, e.get("index", 0)))


def resume_problems(events: Iterable[dict[str, Any]], request_id: str) -> tuple[list[str], int]:
    """(what is wrong with this request's resumes and pieces, how many resumes were checked)."""
    problems: list[str] = []
    parked_at: int | None = None
    read_so_far = 0
    resumes = 0
    for event in _ordered(e for e in events if e.get("request_id") == request_id):
        kind, tokens_read = event.get("kind"), event.get("tokens_read")
        if kind == "YIELDED":
            parked_at = tokens_read
        elif kind == "RESUME":
            resumes += 1
            if parked_at is None:
                problems.append(f"RESUME tokens_read={tokens_read} without a YIELDED before it")
            elif tokens_read != parked_at:
                skipped = (
                    (tokens_read - parked_at) if isinstance(tokens_read, int) and isinstance(parked_at, int) else "?"
                )
                problems.append(
                    f"YIELDED at {parked_at} tokens, then RESUME tokens_read={tokens_read}: "
                    f"the resumed read does not start where it gave way ({skipped} tokens apart)"
                )
            parked_at = None
        elif kind == "PIECE" and isinstance(tokens_read, int) and isinstance(event.get("tokens"), int):
            if tokens_read != read_so_far + event["tokens"]:
                problems.append(
                    f"PIECE of {event['tokens']} tokens after {read_so_far} read reports tokens_read={tokens_read}"
                )
            read_so_far = tokens_read
    return problems, resumes


def resume_step(
    check: str, events: Sequence[dict[str, Any]] | None, requests: dict[str, str], build: str | None = None
) -> Step:
    """One step over every named request (name -> request id): FAIL naming each request whose resumed
    read starts elsewhere than it yielded; INFO when no read was parked (nothing to check)."""
    name = "resume offsets"
    if events is None:
        return Step(check, name, INFO, "the engine has no event feed: resume offsets not checked", build=build)
    failed, evidence, checked = [], [], 0
    for label, rid in requests.items():
        problems, resumes = resume_problems(events, rid)
        checked += resumes
        if resumes:
            evidence.append(f"{label} ({rid}): {resumes} resume(s)")
        for problem in problems:
            failed.append(label)
            evidence.append(f"request {label} ({rid}): {problem}")
    if failed:
        names = ", ".join(dict.fromkeys(failed))
        return Step(
            check,
            name,
            FAIL,
            f"request {names}: a read resumed (or a piece ended) at the wrong offset",
            tuple(evidence),
            build,
        )
    if not checked:
        return Step(check, name, INFO, "no read was parked and resumed: nothing to check", tuple(evidence), build)
    return Step(check, name, PASS, f"{checked} resumed read(s) started where they gave way", tuple(evidence), build)


def place_to_look(events: Sequence[dict[str, Any]], when: float | None, mapped=None, rel=lambda t: f"{t:.3f} s") -> str:
    """The last scheduler decision at or before gate-clock time `when` (a token's arrival).

    An event's gate-clock time is its arrival on the live feed, else `mapped(event)` (engine time
    mapped over). `rel` formats a time for the report."""
    if when is None:
        return "place to look: unknown (the token's arrival time is not known)"
    best, best_t = None, None
    for event in events:
        if event.get("kind") not in DECISIONS:
            continue
        t = event.get("_arrived")
        if t is None and mapped is not None:
            t = mapped(event)
        if t is None or t > when:
            continue
        if best_t is None or t >= best_t:
            best, best_t = event, t
    if best is None:
        return f"place to look: no engine event before the token (arrived {rel(when)})"
    fields = " ".join(
        f"{k}={best[k]}"
        for k in ("slot", "tokens", "tokens_read", "to", "decode_steps", "budget_ms")
        if best.get(k) is not None
    )
    return (
        f"place to look: the engine's last event before that token (arrived {rel(when)}) was "
        f"{best['kind']} of {best.get('request_id') or '?'} at {rel(best_t)} ({fields})"
    )
