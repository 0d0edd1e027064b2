"""The several-machines path on one host: stage ranks started as separate `strata-engine stage` commands
meet the head (RANK 0, --stage-ranks join) through the env:// rendezvous; once on loopback, once with a
stage rank in its own network namespace joined by a veth pair (root and `ip netns` only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine

from tokens_equal import assert_tokens_equal

CHUNK = 8
PROMPTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n    return", "import os\nimport sys\n\nfor name in"]
GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)
STAGE_CMD = [str(Path(sys.executable).parent / "strata-engine"), "stage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def solo():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False, stage_workers="thread") as engine:
        return [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]


def serve_with_joined_ranks(monkeypatch, addr: str, port: int, launches: list[list[str]], extra_env: list[dict]):
    """Start each stage command (rank 1, 2, ...), then the head as RANK 0; generate; shut down; exit codes."""
    base = {**os.environ, "MASTER_ADDR": addr, "MASTER_PORT": str(port), "WORLD_SIZE": str(len(launches) + 1)}
    procs = [
        subprocess.Popen(cmd, env={**base, **env, "RANK": str(rank)}, stdin=subprocess.DEVNULL)
        for rank, (cmd, env) in enumerate(zip(launches, extra_env), start=1)
    ]
    try:
        for name, value in (
            ("MASTER_ADDR", addr),
            ("MASTER_PORT", str(port)),
            ("RANK", "0"),
            ("WORLD_SIZE", str(len(launches) + 1)),
        ):
            monkeypatch.setenv(name, value)
        with Engine.from_pretrained(
            batch=2,
            batch_groups=2,
            split=2,
            prefill_chunk=CHUNK,
            threads=1,
            log_events=False,
            stage_workers="dist",
            stage_ranks="join",
        ) as engine:
            outs = [out.token_ids for out in engine.generate(PROMPTS, GREEDY)]
        codes = [p.wait(30) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs, codes


@pytest.mark.slow
def test_stage_commands_meet_the_head_through_env_rendezvous(solo, monkeypatch):
    outs, codes = serve_with_joined_ranks(monkeypatch, "127.0.0.1", free_port(), [STAGE_CMD, STAGE_CMD], [{}, {}])
    for i, (want, got) in enumerate(zip(solo, outs)):
        assert_tokens_equal(expected=want, actual=got, label=f"joined ranks, prompt {i}", expected_name="solo")
    assert codes == [0, 0], f"stage commands should exit 0 after the head's shutdown, got {codes}"


def test_a_stage_command_without_the_rendezvous_variables_says_which():
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    done = subprocess.run(STAGE_CMD, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE" in done.stderr, done.stderr


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextmanager
def veth_namespace():
    """A network namespace joined to this one by a veth pair: (host address, host device, ns name, ns device)."""
    tag = os.getpid() % 100000
    ns, host_dev, ns_dev = f"strata{tag}", f"sth{tag}", f"stn{tag}"
    try:
        _ip("netns", "add", ns)
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"ip netns is not available here: {err}")
    try:
        _ip("link", "add", host_dev, "type", "veth", "peer", "name", ns_dev)
        _ip("link", "set", ns_dev, "netns", ns)
        _ip("addr", "add", "10.213.7.1/24", "dev", host_dev)
        _ip("link", "set", host_dev, "up")
        for args in (
            ("addr", "add", "10.213.7.2/24", "dev", ns_dev),
            ("link", "set", ns_dev, "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("netns", "exec", ns, "ip", *args)
        yield "10.213.7.1", host_dev, ns, ns_dev
    except subprocess.CalledProcessError as err:
        pytest.skip(f"cannot build a veth pair here: {err.stderr}")
    finally:
        subprocess.run(["ip", "link", "del", host_dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="network namespaces need root")
def test_a_stage_rank_in_its_own_network_namespace(solo, monkeypatch):
    with veth_namespace() as (addr, host_dev, ns, ns_dev):
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", host_dev)  # the head and rank 1 talk over the host's end
        launches = [STAGE_CMD, ["ip", "netns", "exec", ns, *STAGE_CMD]]
        outs, codes = serve_with_joined_ranks(
            monkeypatch, addr, free_port(), launches, [{"GLOO_SOCKET_IFNAME": host_dev}, {"GLOO_SOCKET_IFNAME": ns_dev}]
        )
    for i, (want, got) in enumerate(zip(solo, outs)):
        assert_tokens_equal(expected=want, actual=got, label=f"rank 2 in a netns, prompt {i}", expected_name="solo")
    assert codes == [0, 0], codes
