"""Load bench: every arm at every sweep point (a LoadShape), rounds in alternating arm order, one JSON per run.

A thin layer over the bench's own pieces: order.run_plan (round-major, arms reversed every round, so two
arms run ABBA), launcher.EngineProcess (a fresh engine per run, or a URL), results.ResultsDir (meta.json,
runs/<id>.json written the moment a run ends). A run's JSON holds every request's raw times; metrics
are computed from it by load_report.py, never from live state. A failed run is recorded and the bench goes on.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable


from ..arms import Arm
from ..engines.result import StreamResult
from .field_metrics import SLO, run_metrics
from ..engines.http_stream import run as run_stamped
from ..engines.launcher import EngineProcess, LaunchError
from .loops import LoadShape, run_load
from .client import ConnectionPool, send_request
from ..order import RunKey, run_plan
from ..provenance import collect, utc_now
from ..results import ResultsDir, ResultsError
from ..engines.probe import probe
from .workload import ServerTraits, Workload


@dataclass(frozen=True)
class LoadConfig:
    arms: tuple[Arm, ...]
    points: tuple[LoadShape, ...]  # the sweep: one or more shapes
    workload: Workload
    keepalive: bool = False
    repeat: int = 1
    warmup: int = 0  # requests sent one at a time before the clock starts, not recorded
    slo: SLO = SLO()
    health_timeout_s: float = 300.0
    stop_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.arms:
            raise ValueError("give one or more --arm")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        labels = [p.label for p in self.points]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"sweep points must be one or more and distinct, got {labels}")
        if self.repeat < 1 or self.warmup < 0:
            raise ValueError(f"--repeat must be >= 1 and --warmup >= 0, got {self.repeat} and {self.warmup}")

    def plan(self) -> list[RunKey]:
        return run_plan([a.name for a in self.arms], [p.label for p in self.points], self.repeat)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "load",
            "arms": [a.to_dict() for a in self.arms],
            "points": [p.to_dict() for p in self.points],
            "workload": self.workload.to_dict(),
            "keepalive": self.keepalive,
            "repeat": self.repeat,
            "warmup": self.warmup,
            "slo": self.slo.to_dict(),
            "health_timeout_s": self.health_timeout_s,
            "stop_timeout_s": self.stop_timeout_s,
        }


def start(config: LoadConfig, out: ResultsDir, argv: list[str]) -> dict[str, Any]:
    if out.exists():
        raise ResultsError(f"{out.path} already holds a bench; choose another --out")
    return out.start(config.to_dict(), [k.id for k in config.plan()], collect(argv))


def run_all(config: LoadConfig, out: ResultsDir, say: Callable[[str], None]) -> dict[str, int]:
    """Every run of the plan; counts by status ("ok", "errors", "failed")."""
    arms = {a.name: a for a in config.arms}
    points = {p.label: p for p in config.points}
    counts = {"ok": 0, "errors": 0, "failed": 0}
    plan = config.plan()
    for i, key in enumerate(plan):
        say(f"[{i + 1}/{len(plan)}] {key.id}")
        run = run_once(key, arms[key.arm], points[key.scenario], config, out)
        out.write_run(run)
        counts[run["status"]] += 1
        m = run.get("metrics") or {}
        say(
            f"  {run['status']}"
            + (
                f": {run['failure'].splitlines()[0]}"
                if run.get("failure")
                else f": {m.get('completed')} completed, {_fmt(m.get('output_throughput'))} tok/s out, "
                f"TTFT p50 {_fmt((m.get('ttft_ms') or {}).get('p50'))} ms"
            )
        )
    return counts


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def run_once(key: RunKey, arm: Arm, shape: LoadShape, config: LoadConfig, out: ResultsDir) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": key.id,
        "round": key.round,
        "point": key.scenario,
        "arm": key.arm,
        "shape": shape.to_dict(),
        "workload": config.workload.to_dict(),
        "keepalive": config.keepalive,
        "started_utc": utc_now(),
    }
    started = time.monotonic()
    engine: EngineProcess | None = None
    try:
        if arm.is_url:
            record.update(url=arm.url, command=None)
            url = arm.url
        else:
            engine = EngineProcess.for_arm(arm, out.logs_dir / key.id, config.health_timeout_s)
            record.update(url=engine.url, command=engine.launched)
            engine.start()  # on a port another process took first, again on a new one
            record.update(url=engine.url, command=engine.launched, health_s=round(engine.ready_s, 3))
            url = engine.url
        assert url is not None
        record.update(run_stamped(drive_load(url, shape, config, key.id)))
        if engine is not None and engine.exit_code() is not None:
            record["status"] = "failed"
            record["failure"] = engine.failure(f"the engine exited with status {engine.exit_code()} during the run")
    except LaunchError as exc:
        record.update(status="failed", failure=str(exc), requests=[])
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # an odd server or a bug must not cost the other runs
        record.update(
            status="failed",
            requests=[],
            failure=f"arm {arm.name!r}: {type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=3),
        )
    finally:
        if engine is not None:
            record["exit_status"] = engine.stop(config.stop_timeout_s)
    record["wall_s"] = round(time.monotonic() - started, 3)
    record["metrics"] = run_metrics(record["requests"], config.slo) if record["status"] != "failed" else {}
    return record


async def drive_load(url: str, shape: LoadShape, config: LoadConfig, run_id: str) -> dict[str, Any]:
    """Probe the server, send the warm-up requests, then the load; the run's JSON fields."""
    info = await asyncio.to_thread(probe, url)
    server = ServerTraits(
        model=info.model, token_ids=info.supports_token_ids, vocab_size=info.vocab_size, eos_token_id=info.eos_token_id
    )
    pool = ConnectionPool(url, config.keepalive)
    try:
        for w in range(config.warmup):  # other prompts than the measured ones: index from the far end
            prepared = config.workload.request(10**9 + w, server)
            await send_request(
                pool,
                prepared.path,
                prepared.body,
                StreamResult(f"warmup{w}", "warmup", prompt_tokens=prepared.input_tokens),
            )
        records: dict[int, dict[str, Any]] = {}

        async def send(index: int, offset: float) -> dict[str, Any]:
            prepared = config.workload.request(index, server)
            result = StreamResult(
                f"q{index}", "load", prompt_tokens=prepared.input_tokens, prompt_sha256=prepared.prompt_sha256
            )
            sent = await send_request(
                pool, prepared.path, prepared.body, result, headers={"X-Request-Id": f"{run_id}-q{index}"}
            )
            records[index] = {"sent": sent, "prepared": prepared, "offset": offset}
            return index

        opened_before = pool.opened
        outcome = await run_load(shape, send)
    finally:
        pool.close()
    requests = [_request_record(records[i], outcome["started"]) for i in sorted(records)]
    errors = sum(1 for r in requests if r["error"])
    return {
        "status": "errors" if errors else "ok",
        "server": info.to_dict(),
        "prompt_mode": config.workload.prompt_mode(server),
        "issued": outcome["issued"],
        "max_in_flight": outcome["max_in_flight"],
        "connections_opened": pool.opened - opened_before,
        "requests": requests,
    }


def _request_record(entry: dict[str, Any], origin: float) -> dict[str, Any]:
    sent, prepared = entry["sent"], entry["prepared"]
    record = sent.result.to_dict(origin)
    record.pop("text", None)  # the ids (or their count) are what a load run needs; text only grows the file
    record.update(
        index=prepared.index,
        scheduled_at=round(entry["offset"], 6),
        input_tokens=prepared.input_tokens,
        max_tokens=prepared.max_tokens,
        output_tokens=len(sent.result.times),
        chunk_times=[round(t - origin, 6) for t in sent.chunk_times],
        reused_connection=sent.reused_connection,
        retried=sent.retried,
    )
    return record
