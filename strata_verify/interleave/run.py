"""The interleave check's data: its options (the plan, the behaviours the engine is declared to lack) and
the evidence one run gathered (`InterleaveRun`: every token with its arrival time, the engine's events
when it has a feed). `check.py` fills it; `steps.py` judges it; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata_bench.engines.feed import EventWatcher
from strata_verify.behaviours import parse_lacks
from strata_verify.client import Completion, Sampling
from strata_verify.diverge import NEAR_TIE
from strata_verify.engine_proc import Target
from strata_verify.report import Step
from strata_verify.requests import NAMES, SAMPLED, InterleavePlan, request_id

from strata_verify.interleave.concurrency import SERIAL_WINDOW_S


class OneAtATime(Exception):
    """The server runs one request at a time: the interleaving cannot happen (the reason says how we know)."""


@dataclass(frozen=True)
class InterleaveOptions:
    plan: InterleavePlan = field(default_factory=InterleavePlan)
    near_tie: float = NEAR_TIE
    phase_timeout: float = 900.0  # seconds any one wait may take before the gate gives up
    decode_cap: int = 100_000  # at most this many tokens for A and B (they are cancelled when C-E are done)
    vocab_size: int | None = None  # for engines that say neither it nor a tokenizer like ours
    request_timeout: float = 600.0
    lacks: frozenset[str] = frozenset()  # spec behaviours the engine is declared not to have (behaviours.py)
    serial_window: float = SERIAL_WINDOW_S  # seconds of "one running, one waiting" before one-at-a-time is believed
    sampling: Sampling = field(default_factory=Sampling)  # S's seeded sampling

    def __post_init__(self) -> None:
        if not self.serial_window > 0:
            raise ValueError(f"--serial-window must be > 0, got {self.serial_window}")
        if self.near_tie < 0:
            raise ValueError(f"--near-tie must be >= 0, got {self.near_tie}")
        if self.phase_timeout <= 0:
            raise ValueError(f"phase timeout must be > 0, got {self.phase_timeout}")
        if self.decode_cap < 1:
            raise ValueError(f"decode cap must be >= 1, got {self.decode_cap}")
        object.__setattr__(self, "lacks", parse_lacks(self.lacks))


@dataclass
class InterleaveRun:
    """Everything one interleave check saw; `steps` is filled by steps.judge."""

    target: Target
    options: InterleaveOptions
    info: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, list[int]] = field(default_factory=dict)
    interleaved: dict[str, Completion] = field(default_factory=dict)
    solo: dict[str, Completion] = field(default_factory=dict)
    watcher: EventWatcher | None = None
    t0: float = 0.0
    nonce: str = ""
    one_at_a_time: str | None = None  # why the server cannot interleave, when it cannot
    cache: str = ""  # what was done about the server's prefix cache
    concurrency: list[str] = field(default_factory=list)  # which evidence showed A and B together (or apart)
    sampled: dict[str, Completion] = field(default_factory=dict)  # S: "interleaved", "solo", "solo again"
    sampled_attempts: int = 1  # S sent beside A and B (again while the client's clock could not show it beside them)
    whole: dict[str, Completion] = field(default_factory=dict)  # S and E alone, not streamed (vs their solo streams)
    steps: list[Step] = field(default_factory=list)

    def ids(self, phase: str = "interleave") -> dict[str, str]:
        return {name: request_id(phase, name, self.nonce) for name in (*NAMES, SAMPLED)}

    def rel(self, t: float | None) -> str:
        """A gate-clock time as seconds since the run began: `+1.234 s`."""
        return "n/a" if t is None else f"+{t - self.t0:.3f} s"

    def to_dict(self) -> dict[str, Any]:
        def answer(c: Completion) -> dict[str, Any]:
            return {
                "request_id": c.request_id,
                "token_ids": c.token_ids,
                "logprobs": c.logprobs,
                "times": [round(t - self.t0, 6) for t in c.times],
                "sent_at": round(c.sent_at - self.t0, 6),
                "finish_reason": c.finish_reason,
                "cancelled": c.cancelled,
            }

        events = self.watcher.events if self.watcher else []
        return {
            "target": self.target.describe(),
            "engine": self.info,
            "one_at_a_time": self.one_at_a_time,
            "cache": self.cache,
            "concurrency": self.concurrency,
            "prompt_lengths": {k: len(v) for k, v in self.prompts.items()},
            "interleaved": {k: answer(v) for k, v in self.interleaved.items()},
            "solo": {k: answer(v) for k, v in self.solo.items()},
            "sampled": {
                "sampling": self.options.sampling.describe(),
                **{k: {**answer(v), "text": v.text} for k, v in self.sampled.items()},
            },
            "not streamed": {k: {**answer(v), "text": v.text} for k, v in self.whole.items()},
            "events": [{k: v for k, v in e.items() if k != "_arrived"} for e in events],
        }
