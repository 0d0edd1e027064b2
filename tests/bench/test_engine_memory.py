"""The engine's peak RSS: the sampler sums VmRSS over a real process tree (a child that exits mid-sampling
is fine), a launched arm's run records it and the report shows it, a running server's run says it was not
sampled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from strata_bench.arms import Arm
from strata_bench.engines.memory import RssSampler, tree_pids, tree_rss_bytes
from strata_bench.order import RunKey
from strata_bench.report import build_report
from strata_bench.results import ResultsDir
from strata_bench.runner import BenchConfig, run_once, start_or_resume
from strata_bench.scenarios import Scenario
from strata_bench.tables import render

MB = 1_000_000
CHILD = "import sys; held = b'c' * 50_000_000; print('ready', flush=True); sys.stdin.read()"
PARENT = f"""
import subprocess, sys
held = b'p' * 50_000_000
child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
"""


def _samples_after(sampler: RssSampler, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(sampler.samples) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_the_sampler_sums_the_tree_and_keeps_its_peak_after_a_child_exits():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        assert {proc.pid, child} <= tree_pids(proc.pid)
        sampler = RssSampler(proc.pid, interval_s=0.05).start()
        assert tree_rss_bytes(proc.pid) >= 95 * MB  # 50 MB in each, plus two interpreters
        _samples_after(sampler, 3)
        os.kill(child, signal.SIGKILL)  # the child goes mid-sampling (a zombie until its parent exits)
        _samples_after(sampler, len(sampler.samples) + 3)
        out = sampler.stop()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert out["rss_at_start_bytes"] >= 95 * MB and out["peak_rss_bytes"] >= 95 * MB
    assert sampler.samples[-1] <= out["peak_rss_bytes"] - 40 * MB  # the parent alone at the end
    gone = RssSampler(proc.pid).start().stop()
    assert gone["peak_rss_bytes"] is None and gone["rss_at_start_bytes"] is None and not tree_pids(proc.pid)


SCENARIO = Scenario.from_dict(
    {
        "name": "pair",
        "settle_s": 0.0,
        "system_tokens": 16,
        "requests": [
            {
                "name": "agent",
                "count": 2,
                "role": "session",
                "prompt_tokens": 16,
                "prompt_tokens_max": 48,
                "turns": 2,
                "tool_tokens": 8,
                "max_tokens": 4,
            }
        ],
    }
)


def test_a_launched_arm_records_its_peak_rss_and_a_running_server_is_not_sampled(tmp_path, synthetic):
    arms = (
        Arm("launched", command=f"{sys.executable} -m strata_bench.synthetic --port {{port}} --itl-ms 2"),
        Arm("running", url=synthetic("--itl-ms", "2")),
    )
    config = BenchConfig(arms=arms, scenarios=(SCENARIO,))
    out = ResultsDir(tmp_path / "bench")
    meta = start_or_resume(config, out, ["test"], resume=False)
    runs = {arm.name: run_once(RunKey(0, "pair", arm.name), arm, SCENARIO, config, meta["nonce"], out) for arm in arms}
    for run in runs.values():
        out.write_run(run)
    launched, running = runs["launched"], runs["running"]
    assert launched["status"] == "ok" and launched["peak_rss_bytes"] >= launched["rss_at_start_bytes"] > 10 * MB
    assert launched["metrics"]["peak_rss_mb"] == launched["peak_rss_bytes"] / MB
    assert running["status"] == "ok" and running["peak_rss_bytes"] is None and "not sampled" in running["rss_note"]
    assert "peak_rss_mb" not in running["metrics"]
    row = next(line for line in render(build_report(out), "md").splitlines() if line.startswith("| engine peak RSS"))
    assert " MB" in row.split("|")[2] and row.split("|")[3].strip() == "—"
