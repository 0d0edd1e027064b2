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

from strata_bench import synthetic
from strata_bench.engines import launcher, ports
from strata_bench.engines.launcher import EngineProcess

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")

SYN = f"{sys.executable} -m strata_bench.synthetic"


@pytest.fixture
def foreign():
    """A server of this test's, outside the tree of any process the code under test starts."""
    proc, url = synthetic.spawn()
    yield int(url.rsplit(":", 1)[1])
    proc.kill()
    proc.wait()


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
    handed = iter([foreign])
    monkeypatch.setattr(launcher, "free_port", lambda host="127.0.0.1": next(handed, None) or _free())
    with EngineProcess(SYN, name="synthetic", start_timeout=30) as engine:
        assert engine.port != foreign
        assert ports.listener_is_ours(engine.port, engine.proc.pid) is True
        assert httpx.get(f"{engine.url}/health").status_code == 200


def test_an_engine_that_finds_every_port_taken_says_so(monkeypatch, foreign):
    monkeypatch.setattr(launcher, "free_port", lambda host="127.0.0.1": foreign)
    with pytest.raises(launcher.PortTaken, match=f"port {foreign}"):
        EngineProcess(SYN, name="synthetic", start_timeout=30).start()


def test_the_synthetic_server_handed_a_taken_port_starts_again(monkeypatch, foreign):
    handed = iter([foreign])
    monkeypatch.setattr(ports, "free_port", lambda host="127.0.0.1": next(handed, None) or _free())
    proc, url = synthetic.spawn()
    try:
        assert not url.endswith(f":{foreign}")
        assert ports.listener_is_ours(int(url.rsplit(":", 1)[1]), proc.pid) is True
    finally:
        proc.kill()
        proc.wait()


def _free() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
