"""The spec's behaviours an engine under test may be declared, per run, not to have (`--lacks`).

The interleave gate assumes the spec's engine: D's long read gives way to E (give-way), C's long read goes
in pieces with decode steps between them (pieces), and an event feed tells what the scheduler did
(events). An engine built otherwise (vLLM, llama.cpp) cannot show those; its developer declares them absent
and the steps that exist only to see them become NOT_APPLICABLE instead of NOT_EXERCISED, naming the
declaration. Nothing else changes: an equality check never depends on a declaration, and a step that
fails (a wrong token, a resumed read at the wrong offset) fails whatever was declared.
"""

from __future__ import annotations

from collections.abc import Iterable

from strata_verify.report import INFO, NOT_APPLICABLE, NOT_EXERCISED, PASS, Step

BEHAVIOURS = {
    "give-way": "a long read gives way to a prompt under half its length (step 'D gives way to E')",
    "pieces": "a long read goes in pieces with decode steps between them (step 'C read while A and B decode')",
    "events": "an event feed, GET /v1/events (the gate then judges on the client's clock; step 'resume offsets')",
}
# The interleave step that exists to see each behaviour.
STEP_OF = {"give-way": "D gives way to E", "pieces": "C read while A and B decode", "events": "resume offsets"}


def parse_lacks(value: str | Iterable[str] | None, known: dict[str, str] = BEHAVIOURS) -> frozenset[str]:
    """`"give-way,pieces"` (or an iterable of names) -> the set; ValueError naming the known behaviours
    (`known`: the check's own, e.g. the cache check's)."""
    if value is None:
        return frozenset()
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip().lower() for n in names if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown behaviour(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    return frozenset(names)


def apply_declaration(steps: list[Step], lacks: frozenset[str], step_of: dict[str, str] = STEP_OF) -> list[Step]:
    """Each declared-absent behaviour's step (`step_of`: behaviour -> the step that exists to see it; the
    interleave check's by default): NOT_EXERCISED or INFO becomes NOT_APPLICABLE (reason kept);
    a PASS stays a pass, noting that the behaviour was seen after all; FAIL is never touched. An undeclared
    behaviour's NOT_EXERCISED step (still a failure) says how to declare it."""
    behaviour_of = {step: b for b, step in step_of.items()}
    out = []
    for step in steps:
        behaviour = behaviour_of.get(step.name)
        if behaviour is not None and behaviour not in lacks and step.status == NOT_EXERCISED:
            hint = f"an engine built without {behaviour} declares it: --lacks {behaviour}"
            out.append(Step(step.check, step.name, step.status, step.reason, (*step.evidence, hint), step.build))
            continue
        if behaviour is None or behaviour not in lacks or step.status not in (NOT_EXERCISED, INFO, PASS):
            out.append(step)
            continue
        if step.status == PASS:
            note = f"declared absent (--lacks {behaviour}) but seen in this run"
            out.append(Step(step.check, step.name, PASS, step.reason, (*step.evidence, note), step.build))
            continue
        reason = f"the engine is declared to have no {behaviour} (--lacks {behaviour}); {step.reason}"
        out.append(Step(step.check, step.name, NOT_APPLICABLE, reason, step.evidence, step.build))
    return out
