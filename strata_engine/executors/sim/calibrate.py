"""Check a sim cost profile against a real engine's measurements: the spec's scenarios in model time.

Contract: `simulate(...)` runs the real Scheduler over the SimExecutor on a virtual clock (no wall
time) and returns every request's token times; `scenario_metrics` turns them into the spec's
figures; `python -m strata_engine.executors.sim.calibrate [profile]` prints model vs measured for the three
arms of spec PR 2050 (release, 32K pieces, 16K pieces). docs/measurements/pr2050-sim.md explains the calibration.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

from ...config import SchedulerConfig
from ...events import EventLog
from ...finish import finish_reason
from ...scheduler.request import Request
from ...scheduler.scheduler import Scheduler
from .executor import SimExecutor
from .clock import VirtualClock
from .profile import CostProfile, load_profile

K = 1024
ARMS = {"release": 0, "32K pieces": 32 * K, "16K pieces": 16 * K}

# Spec PR 2050's measured figures (2x RTX 5090, --batch 6 --batch-groups 2, STRATA_PIPED_DECODE_MAX_MS=400).
SPEC_FIGURES: dict[str, dict[str, tuple[float, float, float]]] = {
    "two_joiners": {
        "longest pause of a stream (s)": (12.2, 4.2, 2.6),
        "total time paused per stream (s)": (12.2, 13.3, 15.7),
        "tokens the streams got meanwhile": (289, 527, 793),
        "64K prompt's TTFT (s)": (6.9, 8.1, 10.5),
        "32K prompt's TTFT (s)": (6.1, 8.5, 12.0),
        "token rate of the run (tok/s)": (173, 166, 154),
    },
    "followup": {
        "one-line question sent 1 s in: its TTFT (s)": (5.4, 3.6, 1.8),
        "the 45K prompt's TTFT (s)": (6.0, 7.3, 8.0),
    },
    "read_alone": {"the same prompt read alone (s)": (5.7, 6.4, 7.1)},
}


@dataclass(frozen=True)
class SimRequest:
    name: str
    prompt_tokens: int
    at_s: float = 0.0
    max_tokens: int = 8
    stream: bool = False  # a stream decodes until the scenario ends; a joiner is what it measures


@dataclass
class TimelineSink:
    """Records each token's arrival on the virtual clock; ends a request as the engine does (`finish_reason`)."""

    clock: VirtualClock
    tokens: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    finished: list[Request] = field(default_factory=list)
    ctx: int = 1 << 62  # the scheduler's context; the default never ends a request

    def on_token(self, request: Request, token: Any) -> str | None:
        self.tokens.setdefault(request.request_id, []).append((self.clock.now, token.token_id))
        return finish_reason(
            token.token_id,
            tokens_generated=request.tokens_generated,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            ctx=self.ctx,
            eos_token_id=None,
        )

    def on_finish(self, request: Request) -> None:
        self.finished.append(request)

    def times(self, request_id: str) -> list[float]:
        return [t for t, _ in self.tokens.get(request_id, [])]


def simulate(
    profile: CostProfile,
    config: SchedulerConfig,
    requests: list[SimRequest],
    tail_s: float = 2.0,
    max_steps: int = 1_000_000,
) -> tuple[TimelineSink, EventLog, dict[str, float]]:
    """Run a scenario; streams are cancelled `tail_s` after the last joiner's first token."""
    clock = VirtualClock()
    sink, events = TimelineSink(clock, ctx=config.ctx), EventLog()
    executor = SimExecutor(profile, clock=clock, sleep=clock.sleep, vocab_size=32000, num_stages=config.num_stages)
    scheduler = Scheduler(config, executor, clock=clock, sink=sink, events=events)
    sends = {r.name: r.at_s for r in requests}
    for spec in requests:
        request = Request(
            spec.name,
            [(zlib.crc32(spec.name.encode()) + 7 * i) % 32000 for i in range(spec.prompt_tokens)],
            1 << 30 if spec.stream else spec.max_tokens,
        )
        clock.at(spec.at_s, lambda request=request: scheduler.add(request))
    joiners = [r.name for r in requests if not r.stream]
    streams = [r.name for r in requests if r.stream]
    ended = False
    for _ in range(max_steps):
        if not ended and all(sink.tokens.get(j) for j in joiners):
            last_first = max(sink.tokens[j][0][0] for j in joiners)
            if clock.now >= last_first + tail_s:
                for name in streams:
                    scheduler.cancel(name)
                ended = True
        if scheduler.step():
            continue
        nxt = clock.next_timer()
        if nxt is None:
            return sink, events, sends
        clock.advance_to(nxt)
    raise RuntimeError(f"scenario still running after {max_steps} steps")


def scenario_config(piece_tokens: int, num_stages: int = 2, **overrides: Any) -> SchedulerConfig:
    """The spec's setup: --batch 6 --batch-groups 2, chunk 1024 (32K pieces need 32 x 1024), STRATA_PIPED_DECODE_MAX_MS=400."""
    base = SchedulerConfig(
        batch=6,
        batch_groups=2,
        num_stages=num_stages,
        prefill_chunk=1024,
        ctx=256 * K,
        piped_read_piece=piece_tokens,
        decode_max_ms=400.0,
    )
    return replace(base, **overrides)


def two_joiners(profile: CostProfile, piece_tokens: int, **overrides: Any) -> dict[str, float]:
    streams = [SimRequest(f"stream{i}", 64, stream=True) for i in range(4)]
    settle = 5.0  # the four short reads are done and the streams decode (a read costs ~0.7 s fixed here)
    joiners = [SimRequest("join64k", 64 * K, settle), SimRequest("join32k", 32 * K, settle + 6.0)]
    sink, _, sends = simulate(
        profile, scenario_config(piece_tokens, profile.num_stages, **overrides), streams + joiners
    )
    send = min(sends[j.name] for j in joiners)
    last_first = max(sink.times(j.name)[0] for j in joiners)
    pauses, paused, meanwhile = [], [], 0
    for s in streams:
        times = sink.times(s.name)
        before = [t for t in times if t <= send][-1:]  # a gap that spans the send counts
        window = before + [t for t in times if t > send]
        gaps = [b - a for a, b in zip(window, window[1:])]
        pauses.append(max(gaps, default=0.0))
        paused.append(sum(g for g in gaps if g > 0.5))
        meanwhile += sum(1 for t in times if send < t <= last_first)
    all_times = [t for r in streams + joiners for t in sink.times(r.name) if t >= send]
    return {
        "longest pause of a stream (s)": max(pauses),
        "total time paused per stream (s)": sum(paused) / len(paused),
        "tokens the streams got meanwhile": meanwhile,
        "64K prompt's TTFT (s)": sink.times("join64k")[0] - sends["join64k"],
        "32K prompt's TTFT (s)": sink.times("join32k")[0] - sends["join32k"],
        "token rate of the run (tok/s)": len(all_times) / (max(all_times) - send),
    }


def followup(profile: CostProfile, piece_tokens: int, **overrides: Any) -> dict[str, float]:
    requests = [SimRequest("read45k", 45 * K), SimRequest("question", 24, at_s=1.0)]
    sink, _, sends = simulate(
        profile, scenario_config(piece_tokens, profile.num_stages, **overrides), requests, tail_s=0.0
    )
    return {
        "one-line question sent 1 s in: its TTFT (s)": sink.times("question")[0] - sends["question"],
        "the 45K prompt's TTFT (s)": sink.times("read45k")[0] - sends["read45k"],
    }


def read_alone(profile: CostProfile, piece_tokens: int, **overrides: Any) -> dict[str, float]:
    sink, _, _ = simulate(
        profile,
        scenario_config(piece_tokens, profile.num_stages, **overrides),
        [SimRequest("read45k", 45 * K)],
        tail_s=0.0,
    )
    return {"the same prompt read alone (s)": sink.times("read45k")[0]}


SCENARIOS = {"two_joiners": two_joiners, "followup": followup, "read_alone": read_alone}


def report(profile: CostProfile) -> str:
    """Markdown: each figure, model vs measured, per arm."""
    lines = [
        f"Sim profile `{profile.name}` vs spec PR 2050 (model / measured)",
        "",
        "| scenario | figure | " + " | ".join(ARMS) + " |",
        "|---|---|" + "---:|" * len(ARMS),
    ]
    for scenario, figures in SPEC_FIGURES.items():
        model = [SCENARIOS[scenario](profile, piece) for piece in ARMS.values()]
        for name, measured in figures.items():
            cells = [f"{_fmt(m[name])} / {_fmt(v)}" for m, v in zip(model, measured)]
            lines.append(f"| {scenario} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strata_engine.executors.sim.calibrate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("profile", nargs="?", default="pr2050-2x5090", help="profile name or JSON path")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
