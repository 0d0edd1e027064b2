"""Run order: rounds of every arm, the order reversed every round (two arms: A B, B A, A B: ABBA pairs).

Within a round every scenario runs once per arm; a slow drift of the machine (heat, other load) then
hits each arm equally often first and second.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunKey:
    round: int
    scenario: str
    arm: str

    @property
    def id(self) -> str:
        return f"r{self.round:02d}-{self.scenario}-{self.arm}"


def arm_order(arms: list[str] | tuple[str, ...], round_index: int) -> list[str]:
    if round_index < 0:
        raise ValueError(f"round index must be >= 0, got {round_index}")
    return list(arms) if round_index % 2 == 0 else list(reversed(arms))


def run_plan(arms: list[str] | tuple[str, ...], scenarios: list[str] | tuple[str, ...], repeat: int) -> list[RunKey]:
    """Round-major plan: for each round, each scenario, the arms in that round's order."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    return [RunKey(round=r, scenario=s, arm=a) for r in range(repeat) for s in scenarios for a in arm_order(arms, r)]
