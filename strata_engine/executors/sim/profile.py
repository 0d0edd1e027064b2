"""Cost profiles of the simulated executor: how long a read chunk and a decode micro-batch take.

Contract: a `CostProfile` is a frozen, validated dataclass loaded from JSON (`load_profile(name or
path)`); shipped profiles live in `strata_engine/executors/sim/profiles/`. Costs are milliseconds on ONE
pipeline stage (stages are balanced), so a pipelined run of k chunks on S stages takes about
(k + S - 1) stage times; docs/BATCHING.md shows how a profile is calibrated from real measurements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

PROFILE_DIR = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class CostProfile:
    name: str
    num_stages: int = 1
    read_run_ms: float = 0.0  # fixed cost of one read run: setup and the drain's synchronisation
    read_chunk_ms: float = 0.0  # fixed cost of one chunk on one stage (launches)
    read_token_ms: float = 0.0  # per prompt token on one stage
    read_token_kctx_ms: float = 0.0  # per prompt token per 1,000 tokens of context before it (attention)
    decode_step_ms: float = 0.0  # fixed cost of one decode micro-batch on one stage (weights streamed once)
    decode_seq_ms: float = 0.0  # per sequence in the micro-batch on one stage
    decode_seq_kctx_ms: float = 0.0  # per sequence per 1,000 tokens of its context (attention)
    decode_call_ms: float = 0.0  # fixed cost of one decode call (setup and the drain's synchronisation)
    # The prompt cache: a hit in a slot costs nothing; a save to or restore from the host store copies every
    # layer's KV of each token. Defaults: a 30B-class MoE in bf16 (48 layers x 4 KV heads x 128 x 2 x 2 bytes)
    # over a ~25 GB/s host link.
    copy_token_ms: float = 0.004
    kv_token_bytes: int = 98304
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a cost profile needs a non-empty name")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"profile {self.name}: num_stages must be an integer >= 1, got {self.num_stages!r}")
        for f in fields(self):
            if f.name.endswith("_ms"):
                value = getattr(self, f.name)
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                    raise ValueError(f"profile {self.name}: {f.name} must be a number >= 0 ms, got {value!r}")
        if not isinstance(self.kv_token_bytes, int) or self.kv_token_bytes < 1:
            raise ValueError(
                f"profile {self.name}: kv_token_bytes must be an integer >= 1, got {self.kv_token_bytes!r}"
            )
        if self.read_token_ms + self.read_chunk_ms <= 0:
            raise ValueError(f"profile {self.name}: reading must cost something (read_token_ms or read_chunk_ms > 0)")
        if self.decode_step_ms + self.decode_seq_ms <= 0:
            raise ValueError(f"profile {self.name}: decoding must cost something (decode_step_ms or decode_seq_ms > 0)")

    # -- costs on one stage ---------------------------------------------------------------------
    def read_chunk_stage_ms(self, tokens: int, context_before: int) -> float:
        """One chunk of `tokens` prompt tokens after `context_before` tokens already in the KV cache.
        Attention is charged at the chunk's mean context (its tokens see on average half of it)."""
        mean_context = context_before + tokens / 2.0
        return self.read_chunk_ms + tokens * (self.read_token_ms + self.read_token_kctx_ms * mean_context / 1000.0)

    def decode_stage_ms(self, contexts: list[int]) -> float:
        """One decode micro-batch whose sequences hold `contexts` tokens each."""
        return self.decode_step_ms + sum(self.decode_seq_ms + self.decode_seq_kctx_ms * c / 1000.0 for c in contexts)

    def mixed_decode_extra_ms(self, contexts: list[int]) -> float:
        """Decode tokens riding along with a read chunk pay per sequence, not the micro-batch's fixed cost."""
        return sum(self.decode_seq_ms + self.decode_seq_kctx_ms * c / 1000.0 for c in contexts)

    def read_alone_ms(
        self, prompt_tokens: int, chunk: int, piece_tokens: int = 0, num_stages: int | None = None
    ) -> float:
        """Model time to read a prompt with nothing else running, in runs of `piece_tokens` (0 = one run)."""
        stages = num_stages or self.num_stages
        total, start = 0.0, 0
        while start < prompt_tokens:
            end = prompt_tokens if piece_tokens <= 0 else min(prompt_tokens, start + piece_tokens)
            costs = [self.read_chunk_stage_ms(min(s + chunk, end) - s, s) for s in range(start, end, chunk)]
            total += self.read_run_ms + sum(costs) + (stages - 1) * costs[-1]
            start = end
        return total


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str | Path) -> CostProfile:
    """A shipped profile by name (`pr2050-2x5090`) or a JSON file by path."""
    path = Path(name_or_path)
    if not path.is_file():
        shipped = PROFILE_DIR / f"{name_or_path}.json"
        if not shipped.is_file():
            raise ValueError(
                f"no sim profile {str(name_or_path)!r}: not a file, and not one of {', '.join(available_profiles())}"
            )
        path = shipped
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"sim profile {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"sim profile {path} must be a JSON object")
    data = {k: v for k, v in data.items() if not k.startswith("_")}  # "_comment"-style keys document the file
    known = {f.name for f in fields(CostProfile)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"sim profile {path}: unknown keys {unknown}; known: {sorted(known)}")
    data.setdefault("name", path.stem)
    return CostProfile(**data)
