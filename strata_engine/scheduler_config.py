"""The pure-Python scheduler's configuration: `SchedulerConfig`, a frozen dataclass validated in __post_init__.

`EngineConfig.scheduler_config` (config.py) resolves it from the flags, the layout and the STRATA_* variables
(knobs.py) that set its fields (`ENV_VARS`); zero piece size means the one-run read ("release").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from . import knobs

# Variable name -> the SchedulerConfig field it sets (knobs.KNOBS has the rest: parser, default, help)
ENV_VARS: dict[str, str] = {
    name: knob.sets.split(".", 1)[1] for name, knob in knobs.KNOBS.items() if knob.sets.startswith("SchedulerConfig.")
}
PROMPT_CACHE_MIN_TOKENS = 32  # a shorter match does not pay for pushing a slot's prefix out


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the pure-Python scheduler (no torch; the torch runtime's are RuntimeConfig's)."""

    batch: int = 4
    batch_groups: int = 1  # resolved (auto already replaced by the stage count)
    num_stages: int = 1
    prefill_chunk: int = 512
    ctx: int = 4096
    piped_read_piece: int = 0
    decode_share: float = 0.5
    decode_min_ms: float = 20.0
    decode_max_ms: float = 400.0
    read_mix: int = 0
    pause_target_ms: float = 0.0
    decode_merge: int = 0
    prompt_cache_mib: int = 0  # 0 = no slot reuse and no host store (the engine's default is on: EngineConfig)
    prompt_cache_min_tokens: int = PROMPT_CACHE_MIN_TOKENS

    def __post_init__(self) -> None:
        if self.prompt_cache_mib < 0 or self.prompt_cache_min_tokens < 1:
            raise ValueError(
                f"prompt_cache_mib must be >= 0 and prompt_cache_min_tokens >= 1, got "
                f"{self.prompt_cache_mib} and {self.prompt_cache_min_tokens}"
            )
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not 1 <= self.batch_groups <= self.batch:
            raise ValueError(f"batch_groups must be in [1, batch={self.batch}], got {self.batch_groups}")
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {self.prefill_chunk}")
        if self.ctx < 2:
            raise ValueError(f"ctx must be >= 2, got {self.ctx}")
        if self.decode_max_ms < self.decode_min_ms:
            raise ValueError(
                f"STRATA_PIPED_DECODE_MAX_MS ({self.decode_max_ms}) is below STRATA_PIPED_DECODE_MIN_MS ({self.decode_min_ms})"
            )

    @property
    def pipelined(self) -> bool:
        return self.batch_groups > 1

    def group_slots(self) -> list[list[int]]:
        """Slots split into batch_groups contiguous groups: --batch 4 --batch-groups 2 -> [[0,1],[2,3]]."""
        base, extra = divmod(self.batch, self.batch_groups)
        sizes = [base + (1 if g < extra else 0) for g in range(self.batch_groups)]
        return [list(range(sum(sizes[:g]), sum(sizes[: g + 1]))) for g in range(self.batch_groups)]

    def with_env(self, env: Mapping[str, str] | None = None) -> "SchedulerConfig":
        """The STRATA_* variables over this config: an unset one keeps this config's value, which is the
        variable's default unless a layout set it (layout.py); a bad one (or MAX below MIN) raises naming it."""
        return self.with_knobs(knobs.read_set(ENV_VARS, env))

    def with_knobs(self, found: Mapping[str, Any]) -> "SchedulerConfig":
        """`with_env` over knobs already read (knobs.read_set): an absent one keeps this config's value."""
        return replace(self, **{fld: found[name] for name, fld in ENV_VARS.items() if name in found})
