"""A server we start must be the one that answers on its port: two processes handed the same free port
(xdist workers, two benches) once had a test talk to the other's engine, which then went away."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from strata_bench.arms import Arm
from strata_bench.engines import launcher, ports
from strata_bench.engines.launcher import EngineProcess
from strata_bench.order import RunKey
from strata_bench.results import ResultsDir
from strata_bench.runner import BenchConfig, run_once, start_or_resume
from strata_bench.scenarios import Scenario
from strata_bench.synthetic.launcher import spawn

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")

SYN = f"{sys.executable} -m strata_bench.synthetic"


@pytest.fixture
def foreign():
    """A server of this test's, outside the tree of any process the code under test starts."""
    proc, url = spawn()
    yield int(url.rsplit(":", 1)[1])
    proc.kill()
    proc.wait()


@pytest.fixture
def silent():
    """A port held by a listening socket of this test's that never answers (another engine still loading)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_listener_is_ours_only_in_the_tree_that_holds_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert ports.listener_is_ours(port, 0) is None  # bound, not listening: nothing to tell
        sock.listen()
        assert ports.listener_is_ours(port, os.getpid()) is True
        other = subprocess.Popen(["sleep", "30"])
        try:
            assert ports.listener_is_ours(port, other.pid) is False
        finally:
            other.kill()
            other.wait()


def test_an_engine_handed_a_taken_port_starts_again_on_another(monkeypatch, foreign):
    handed = Handed(foreign)
    monkeypatch.setattr(launcher, "free_port", lambda host="127.0.0.1": handed())
    with EngineProcess(SYN, name="synthetic", start_timeout=30) as engine:
        assert handed.ports[0] == foreign, "the taken port was never tried"
        assert engine.port == handed.ports[-1] != foreign
        assert ports.listener_is_ours(engine.port, engine.proc.pid) is True
        assert httpx.get(f"{engine.url}/health").status_code == 200


def test_an_engine_that_finds_every_port_taken_says_so(monkeypatch, foreign):
    monkeypatch.setattr(launcher, "free_port", lambda host="127.0.0.1": foreign)
    with pytest.raises(launcher.PortTaken, match=f"port {foreign}"):
        EngineProcess(SYN, name="synthetic", start_timeout=30).start()


@pytest.mark.parametrize("holder", ["foreign", "silent"])
def test_the_synthetic_server_handed_a_taken_port_starts_again(request, holder):
    """Another server answers on the port (ours never binds it), or holds it without answering (ours exits)."""
    taken = request.getfixturevalue(holder)
    handed = Handed(taken)
    proc, url = spawn(choose=handed)
    try:
        assert handed.ports[0] == taken, "the taken port was never tried"
        assert url == f"http://127.0.0.1:{handed.ports[-1]}" and handed.ports[-1] != taken
        assert ports.listener_is_ours(handed.ports[-1], proc.pid) is True
        assert httpx.get(f"{url}/health").status_code == 200
    finally:
        proc.kill()
        proc.wait()


def test_a_bench_run_whose_engine_is_handed_a_taken_port_runs_on_another(tmp_path, monkeypatch, foreign):
    handed = Handed(foreign)
    monkeypatch.setattr(launcher, "free_port", lambda host="127.0.0.1": handed())
    arm = Arm("launched", command=f"{SYN} --port {{port}} --itl-ms 2")
    scenario = Scenario.from_dict(
        {
            "name": "one",
            "settle_s": 0.0,
            "requests": [{"name": "a", "role": "stream", "prompt_tokens": 8, "max_tokens": 4}],
        }
    )
    config = BenchConfig(arms=(arm,), scenarios=(scenario,))
    out = ResultsDir(tmp_path / "bench")
    meta = start_or_resume(config, out, ["test"], resume=False)
    run = run_once(RunKey(0, "one", "launched"), arm, scenario, config, meta["nonce"], out)
    assert handed.ports[0] == foreign, "the taken port was never tried"
    assert run["status"] == "ok", run.get("failure")
    assert run["url"] == f"http://127.0.0.1:{handed.ports[-1]}" and handed.ports[-1] != foreign
    assert f"--port {handed.ports[-1]} " in run["command"] and run["health_s"] >= 0


class Handed:
    """Ports for the code under test: `taken` first, then free ones; `ports` lists those it asked for, so a
    test sees that the taken one was tried (a launcher that never asked would pass without retrying)."""

    def __init__(self, taken: int):
        self.ports: list[int] = []
        self.taken = taken

    def __call__(self) -> int:
        self.ports.append(_free() if self.ports else self.taken)
        return self.ports[-1]


def _free() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
