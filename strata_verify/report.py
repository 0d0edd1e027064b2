"""The gate's verdict: steps with a status and their evidence, rendered as text, markdown or JSON.

Exit status: 0 only when at least one step passed and every step passed (steps marked `info` inform and
never fail; `not applicable` marks a step for a behaviour the engine is declared to lack, which never
fails either); 1 when any step failed or was not exercised; 2 when the gate could not run.
A step whose interleaving did not happen is NOT_EXERCISED, which fails like a wrong answer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
NOT_EXERCISED = "not exercised"
INFO = "info"
NOT_APPLICABLE = "not applicable"  # a behaviour the engine is declared to lack (strata_verify.behaviours)
STATUSES = (PASS, FAIL, NOT_EXERCISED, INFO, NOT_APPLICABLE)

EXIT_OK, EXIT_FAIL, EXIT_GATE = 0, 1, 2


@dataclass(frozen=True)
class Step:
    check: str  # "interleave", "determinism", "builds"
    name: str
    status: str
    reason: str
    evidence: tuple[str, ...] = ()
    build: str | None = None  # the build's name in `builds`

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        object.__setattr__(self, "evidence", tuple(self.evidence))

    @property
    def failed(self) -> bool:
        return self.status in (FAIL, NOT_EXERCISED)

    @property
    def title(self) -> str:
        prefix = f"{self.build}: " if self.build else ""
        return f"{prefix}{self.check}: {self.name}"


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    gate_error: str | None = None
    stderr_tail: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, *steps: Step) -> None:
        self.steps.extend(steps)

    @property
    def exit_code(self) -> int:
        if self.gate_error is not None:
            return EXIT_GATE
        if not any(s.status not in (INFO, NOT_APPLICABLE) for s in self.steps):
            return EXIT_FAIL  # nothing was checked: never a pass
        return EXIT_FAIL if any(s.failed for s in self.steps) else EXIT_OK

    @property
    def verdict(self) -> str:
        return {EXIT_OK: "PASS", EXIT_FAIL: "FAIL", EXIT_GATE: "COULD NOT RUN"}[self.exit_code]

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for s in self.steps if s.status == status) for status in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "gate_error": self.gate_error,
            "stderr_tail": self.stderr_tail,
            "meta": self.meta,
            "steps": [asdict(s) for s in self.steps],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def render_text(self) -> str:
        lines = [f"{key}: {value}" for key, value in self.meta.items()]
        for step in self.steps:
            lines.append(f"[{step.status.upper():^13}] {step.title}: {step.reason}")
            lines.extend(f"{'':16}{line}" for line in step.evidence)
        if self.gate_error:
            lines.append(f"[COULD NOT RUN] {self.gate_error}")
            if self.stderr_tail:
                lines.append("  engine stderr (last lines):")
                lines.extend(f"    {line}" for line in self.stderr_tail)
        lines.append(self._summary_line())
        return "\n".join(lines)

    def render_markdown(self) -> str:
        icon = {
            PASS: "✅",
            FAIL: "❌",
            NOT_EXERCISED: "⚠️ not exercised",
            INFO: "ℹ️",
            NOT_APPLICABLE: "➖ not applicable",
        }
        out = [f"### strata-verify: {self.verdict}", ""]
        for key, value in self.meta.items():
            out.append(f"- {key}: `{value}`")
        if self.meta:
            out.append("")
        if self.steps:
            out += ["| step | result | reason |", "|---|---|---|"]
            out += [f"| {_md(s.title)} | {icon[s.status]} | {_md(s.reason)} |" for s in self.steps]
            out.append("")
            details = [s for s in self.steps if s.evidence]
            if details:
                out += ["<details><summary>Evidence</summary>", ""]
                for step in details:
                    out.append(f"**{_md(step.title)}** ({step.status})")
                    out.append("")
                    out += [f"- {_md(line)}" for line in step.evidence]
                    out.append("")
                out += ["</details>", ""]
        if self.gate_error:
            out += [f"**Could not run:** {_md(self.gate_error)}", ""]
            if self.stderr_tail:
                out += ["```", *self.stderr_tail, "```", ""]
        out.append(self._summary_line())
        return "\n".join(out)

    def _summary_line(self) -> str:
        c = self.counts()
        na = f", {c[NOT_APPLICABLE]} not applicable" if c[NOT_APPLICABLE] else ""
        return (
            f"strata-verify: {self.verdict} ({c[PASS]} passed, {c[FAIL]} failed, {c[NOT_EXERCISED]} not exercised, "
            f"{c[INFO]} info{na}; exit {self.exit_code})"
        )


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
