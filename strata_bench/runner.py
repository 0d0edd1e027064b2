"""Runner: a bench's whole plan (order.py), a fresh engine per run, each run saved the moment it ends.

A run that fails (engine does not start, never gets healthy, dies, times out) is recorded as failed with
the arm's name and its last stderr lines, and the bench goes on. While a launched engine runs, its process
tree's resident memory is sampled (engines/memory.py) into the run's `peak_rss_bytes`. Ctrl-C stops the current engine and
leaves every finished run on disk; `resume` runs only what the directory does not hold yet.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .arms import Arm
from .driver import RunContext, drive
from .engines.http_stream import run as run_stamped
from .engines.launcher import EngineProcess, LaunchError
from .engines.memory import RssSampler, not_sampled
from .metrics import DEFAULT_PAUSE_THRESHOLD_S, compute_metrics
from .order import RunKey, run_plan
from .progress import Progress
from .provenance import collect, utc_now
from .results import ResultsDir, ResultsError
from .scenarios import Scenario


@dataclass(frozen=True)
class BenchConfig:
    arms: tuple[Arm, ...]
    scenarios: tuple[Scenario, ...]  # already scaled
    repeat: int = 1
    scale: float = 1.0
    time_scale: float = 1.0  # modelled seconds per wall second (sim engines); delays are divided by it
    pause_threshold_s: float = DEFAULT_PAUSE_THRESHOLD_S
    health_timeout_s: float = 300.0
    run_timeout_s: float = 3600.0
    stop_timeout_s: float = 10.0
    cold_per_arm: bool = False  # prompts differ per arm too (servers that keep a prefix cache across runs)
    preset: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if len(self.arms) < 1:
            raise ValueError("a bench needs at least one arm (one measures a server, two or more compare)")
        if self.repeat < 1:
            raise ValueError(f"--repeat must be >= 1, got {self.repeat}")
        for name in ("scale", "time_scale", "health_timeout_s", "run_timeout_s", "stop_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.pause_threshold_s < 0:
            raise ValueError(f"--pause-threshold must be >= 0, got {self.pause_threshold_s}")

    def plan(self) -> list[RunKey]:
        return run_plan([a.name for a in self.arms], [s.name for s in self.scenarios], self.repeat)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arms": [a.to_dict() for a in self.arms],
            "scenarios": [s.to_dict() for s in self.scenarios],
            "repeat": self.repeat,
            "scale": self.scale,
            "time_scale": self.time_scale,
            "pause_threshold_s": self.pause_threshold_s,
            "health_timeout_s": self.health_timeout_s,
            "run_timeout_s": self.run_timeout_s,
            "stop_timeout_s": self.stop_timeout_s,
            "cold_per_arm": self.cold_per_arm,
            "preset": self.preset,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchConfig":
        return cls(
            arms=tuple(Arm.from_dict(a) for a in data["arms"]),
            scenarios=tuple(Scenario.from_dict(s) for s in data["scenarios"]),
            **{
                k: data[k]
                for k in (
                    "repeat",
                    "scale",
                    "time_scale",
                    "pause_threshold_s",
                    "health_timeout_s",
                    "run_timeout_s",
                    "stop_timeout_s",
                    "cold_per_arm",
                    "preset",
                )
                if k in data
            },
        )


def start_or_resume(config: BenchConfig, out: ResultsDir, argv: list[str], resume: bool) -> dict[str, Any]:
    """The directory's meta: new, or the existing one when resuming the same bench."""
    if out.exists():
        if not resume:
            raise ResultsError(f"{out.path} already holds a bench; pass --resume to continue it, or another --out")
        meta = out.read_meta()
        theirs = BenchConfig.from_dict(meta["config"])
        if theirs != config:
            mine, old = config.to_dict(), theirs.to_dict()
            diff = [k for k in mine if k != "preset" and mine[k] != old.get(k)]
            raise ResultsError(
                f"--resume: {out.path} was started with other settings ({', '.join(diff)}); "
                "run `strata-bench run --resume --out DIR` alone to reuse its settings"
            )
        meta.setdefault("resumed_utc", []).append(utc_now())
        out.write_meta(meta)
        return meta
    if resume and out.path.exists() and any(out.path.iterdir()):
        raise ResultsError(f"--resume: {out.path} has no meta.json, so it is not a bench directory")
    return out.start(config.to_dict(), [k.id for k in config.plan()], collect(argv))


def run_bench(config: BenchConfig, out: ResultsDir, meta: dict[str, Any], progress: Progress) -> dict[str, int]:
    """Every run of the plan not yet on disk; returns counts by status."""
    arms = {a.name: a for a in config.arms}
    scenarios = {s.name: s for s in config.scenarios}
    counts = {"ok": 0, "errors": 0, "failed": 0, "missed": 0, "skipped": 0}
    for index, key in enumerate(config.plan()):
        if out.has_run(key.id):
            progress.skip(key.id)
            counts["skipped"] += 1
            continue
        progress.begin(index, key.id, key.arm)
        run = run_once(key, arms[key.arm], scenarios[key.scenario], config, meta["nonce"], out)
        out.write_run(run)
        counts[run["status"]] += 1
        detail = (
            run["failure"].splitlines()[0]
            if run.get("failure")
            else run["missed_join"]
            if run.get("missed_join")
            else _headline(run)
        )
        progress.end(run["status"], detail)
        if run.get("failure"):
            progress.message(run["failure"])
        for warning in run.get("warnings", []):
            progress.message(f"  warning: {warning}")
    return counts


def _exit_code_after(engine: EngineProcess, run: dict[str, Any]) -> int | None:
    """The engine's exit status if it died during the run; a dying engine's requests fail a moment
    before the process is gone, so a run with request errors waits briefly for the exit."""
    if run.get("status") not in ("ok", "missed"):
        engine.wait_exit(0.5)
    return engine.exit_code()


def _headline(run: dict[str, Any]) -> str:
    m = run.get("metrics") or {}
    parts = [f"{k}={m[k]:.3g}" for k in ("longest_pause_s", "token_rate") if m.get(k) is not None]
    errors = [r["name"] for r in run.get("requests", []) if r.get("error")]
    if errors:
        parts.append(f"request errors: {', '.join(errors)}")
    return ", ".join(parts)


def run_once(
    key: RunKey, arm: Arm, scenario: Scenario, config: BenchConfig, nonce: str, out: ResultsDir
) -> dict[str, Any]:
    """One run as a dict; failures are recorded in it, only KeyboardInterrupt propagates."""
    prompt_key = (nonce, key.round, key.scenario) + ((key.arm,) if config.cold_per_arm else ())
    ctx = RunContext(
        run_id=key.id,
        scenario=scenario,
        prompt_key=prompt_key,
        time_scale=config.time_scale,
        run_timeout_s=config.run_timeout_s,
    )
    record: dict[str, Any] = {
        "id": key.id,
        "round": key.round,
        "scenario": key.scenario,
        "arm": key.arm,
        "started_utc": utc_now(),
        "scenario_params": scenario.to_dict(),
        "time_scale": config.time_scale,
        "pause_threshold_s": config.pause_threshold_s,
    }
    started = time.monotonic()
    engine: EngineProcess | None = None
    memory: RssSampler | None = None
    try:
        if arm.is_url:
            record.update(url=arm.url, command=None, **not_sampled("a running server (NAME=@URL): not sampled"))
            run = run_stamped(drive(arm.url, ctx))
        else:
            engine = EngineProcess.for_arm(arm, out.logs_dir / key.id, config.health_timeout_s)
            record.update(url=engine.url, command=engine.launched, stderr=str(engine.stderr_path.relative_to(out.path)))
            engine.start()  # on a port another process took first, again on a new one
            record.update(url=engine.url, command=engine.launched, health_s=round(engine.ready_s, 3))
            memory = RssSampler(engine.proc.pid).start()  # its process tree, from health to the run's end
            run = run_stamped(drive(engine.url, ctx, engine.exit_code))
            code = _exit_code_after(engine, run)
            if code is not None:  # died mid-run: its requests' errors are the symptom, not the story
                run["status"] = "failed"
                run["failure"] = engine.failure(
                    run.get("failure") or f"the engine exited with status {code} during the run"
                )
    except LaunchError as exc:
        run = {"status": "failed", "failure": str(exc), "requests": [], "engine_events": None, "warnings": []}
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug or an odd server must not cost the other runs
        run = {
            "status": "failed",
            "failure": f"{arm.label}: {type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=3),
            "requests": [],
            "engine_events": None,
            "warnings": [],
        }
    finally:
        if memory is not None:
            record.update(memory.stop())
        if engine is not None:
            record["exit_status"] = engine.stop(config.stop_timeout_s)
    record.update({k: v for k, v in run.items() if k != "id"})
    record["wall_s"] = round(time.monotonic() - started, 3)
    record["metrics"] = compute_metrics(record, config.pause_threshold_s) if record["status"] != "failed" else {}
    return record
