"""The shared launcher as the gate uses it: a fresh engine on a free port, `{port}`, readiness, stderr."""

from __future__ import annotations

import httpx
import pytest

from strata_bench.engines.launcher import EngineProcess, LaunchError, with_port

from .support import fake


def test_with_port_appends_or_substitutes():
    assert with_port("serve --batch 4", 8123) == "serve --batch 4 --host 127.0.0.1 --port 8123"
    assert with_port("proxy --listen {port} -- serve", 8123) == "proxy --listen 8123 -- serve"


def test_starts_serves_and_stops():
    with EngineProcess(fake()) as engine:
        assert engine.url.endswith(f":{engine.port}")
        assert httpx.get(f"{engine.url}/health").status_code == 200
        assert "--port" in engine.launched
    assert not engine.alive()


def test_an_engine_that_exits_at_start_raises_with_its_stderr():
    with pytest.raises(LaunchError, match="exited with status 3") as info:
        EngineProcess(fake("--fail-start")).start()
    assert any("cannot load model weights" in line for line in info.value.stderr_tail)


def test_a_command_that_does_not_exist_raises():
    with pytest.raises(LaunchError) as info:
        EngineProcess("no-such-engine-binary serve", start_timeout=30).start()
    assert any("not found" in line for line in info.value.stderr_tail)


def test_empty_command_is_refused():
    with pytest.raises(ValueError, match="empty"):
        EngineProcess("  ")
