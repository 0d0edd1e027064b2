"""Faults of the distributed stages: a rank killed in the middle of a read, a rank that stops answering,
/health while a rank is down, the restart, and shutdown (or a killed head) leaving no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine

from fakes.engine import FakeEngine
from server_helpers import serving
from tokens_equal import assert_tokens_equal

CHUNK = 8
LONG = "".join(f"    x_{i} = compute({i})\n" for i in range(40))  # ~800 tokens: 100 chunks
SHORT = "def add(a, b):\n    return"
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def solo():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False, stage_workers="thread") as engine:
        return engine.generate([SHORT], GREEDY)[0].token_ids


def dist_engine(**config) -> Engine:
    return Engine.from_pretrained(
        batch=2, split=2, prefill_chunk=CHUNK, threads=1, log_events=False, stage_workers="dist", **config
    )


@pytest.mark.slow
def test_a_rank_killed_mid_read_fails_the_read_naming_it_then_the_ranks_come_back(solo, monkeypatch):
    engine = dist_engine()
    pipeline = engine.executor.pipeline
    first_pids = list(pipeline.ranks.pids)
    read_part = engine.executor._read_part

    def kill_at_chunk_five(request, start, end):  # the kill lands with chunks before it in flight or done
        if start == 5 * CHUNK:
            os.kill(first_pids[1], signal.SIGKILL)
        return read_part(request, start, end)

    monkeypatch.setattr(engine.executor, "_read_part", kill_at_chunk_five)
    with engine:
        failed = engine.submit(LONG, GREEDY).result(timeout=120)
        assert failed.finish_reason == "error", failed
        assert "stage rank 2 (stage 1, layers 2-3, cpu)" in failed.error and "SIGKILL" in failed.error, failed.error
        monkeypatch.setattr(engine.executor, "_read_part", read_part)
        wait_until(lambda: pipeline.health() is None, 180, "the stage ranks to restart")
        assert not set(pipeline.ranks.pids) & set(first_pids) and not any(alive(p) for p in first_pids)
        again = engine.generate([SHORT], GREEDY)[0]
        assert_tokens_equal(expected=solo, actual=again.token_ids, label="after the restart", expected_name="solo")
        pids = list(pipeline.ranks.pids)
    assert pids and not any(alive(p) for p in pids), "stage ranks outlived the engine"


@pytest.mark.slow
def test_a_rank_that_stops_answering_times_out_naming_it():
    with dist_engine(stage_timeout_s=2.0) as engine:
        pipeline = engine.executor.pipeline
        stopped = pipeline.ranks.pids[0]
        os.kill(stopped, signal.SIGSTOP)
        try:
            started = time.monotonic()
            failed = engine.submit(SHORT, GREEDY).result(timeout=60)
            assert failed.finish_reason == "error" and time.monotonic() - started < 30, failed
            assert "stage rank 1 (stage 0, layers 0-1, cpu) is stopped" in failed.error, failed.error
            fault = pipeline.health()
            assert fault is None or "stage rank 1" in fault  # restarting, or already back
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:  # already replaced by the restart
                pass
        wait_until(lambda: pipeline.health() is None, 180, "the stage ranks to restart")
        assert engine.generate([SHORT], GREEDY)[0].finish_reason == "length"
    assert not alive(stopped)


def test_health_and_new_requests_say_503_while_a_stage_rank_is_down():
    class Ranks:
        fault = "stage rank 2 (stage 1, layers 2-3, cpu) exited with code -9 (SIGKILL); restarting the stage ranks"

        def health(self):
            return self.fault

    with FakeEngine(batch=2, ctx=256, step_s=0.001) as engine:
        engine.executor = type("Executor", (), {"pipeline": Ranks()})()
        with serving(engine) as (url, _app):
            health = httpx.get(f"{url}/health")
            assert health.status_code == 503 and health.json() == {"status": "error", "error": Ranks.fault}
            refused = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert refused.status_code == 503 and "stage rank 2" in refused.json()["error"]["message"]
            Ranks.fault = None
            assert httpx.get(f"{url}/health").status_code == 200
            assert httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


HEAD = """
import sys
from strata_engine.engine import Engine
engine = Engine.from_pretrained(batch=2, split=2, prefill_chunk=8, threads=1, log_events=False, stage_workers="dist")
print(" ".join(map(str, engine.executor.pipeline.ranks.pids)), flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_stage_ranks_exit_when_their_head_is_killed():
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in head.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        head.kill()
        head.wait(10)
        wait_until(lambda: not any(alive(p) for p in pids), 10, "the orphaned stage ranks to exit")
    finally:
        head.kill()


def children(pid: int) -> list[int]:
    """Children of every thread of `pid` (the server starts its ranks from its loader thread)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_serve_starts_its_stage_ranks_and_sigterm_stops_them_all():
    exe = str(os.path.join(os.path.dirname(sys.executable), "strata-engine"))
    server = subprocess.Popen(
        [
            exe,
            "serve",
            "--port",
            "0",
            "--split",
            "2",
            "--batch-groups",
            "2",
            "--threads",
            "1",
            "--stage-workers",
            "dist",
            "--no-log-events",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("STRATA_READY url="), (line, server.poll())
        url = line.split("url=", 1)[1].split()[0]
        wait_until(lambda: httpx.get(f"{url}/health").status_code == 200, 300, "the engine and its ranks to load")
        ranks = children(server.pid)
        assert len(ranks) == 2, f"expected two stage ranks under the server, found {ranks}"
        done = httpx.post(
            f"{url}/v1/completions", json={"prompt": SHORT, "max_tokens": 4, "temperature": 0}, timeout=60
        )
        assert done.status_code == 200 and done.json()["choices"][0]["finish_reason"] == "length", done.text
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        wait_until(lambda: not any(alive(p) for p in ranks), 10, "the stage ranks to exit with the server")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_killed_rank_is_named_with_its_signal_even_while_another_thread_holds_its_wait_lock():
    """Popen.poll() answers None while another thread waits on the process; the zombie's status is still read."""
    from strata_engine.runtime.stage_ranks.ranks import LocalRanks

    ranks = LocalRanks(num_stages=1)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ranks.procs.append(proc)
    proc.kill()
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    with proc._waitpid_lock:  # what a concurrent poll or wait holds: poll() now answers None
        assert proc.poll() is None
    real_poll = proc.poll
    proc.poll = lambda: None
    try:
        assert ranks.describe(1) == "exited with code -9 (SIGKILL)"
    finally:
        proc.poll = real_poll
