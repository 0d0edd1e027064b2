"""The real console script in a subprocess: `strata-engine serve --port 0` prints one STRATA_READY line,
serves, and on SIGTERM/SIGINT ends in-flight streams cleanly, exits 0 and releases the port;
`strata-engine generate` streams to stdout; --help documents the flags and STRATA_* variables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("strata_engine.engine", reason="strata_engine.engine does not import yet")

EXE = shutil.which("strata-engine", path=os.path.dirname(sys.executable)) or shutil.which("strata-engine")
SIM = ["--executor", "sim", "--time-scale", "50", "--no-log-events", "--ctx", "8192"]
pytestmark = [
    pytest.mark.skipif(EXE is None, reason="the strata-engine console script is not installed"),
    pytest.mark.slow,
]


class Server:
    """`strata-engine serve` in a subprocess; `url` from its STRATA_READY line."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen(
            [EXE, "serve", "--port", "0", *SIM, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        line = self.proc.stdout.readline()
        assert line.startswith("STRATA_READY url=http://127.0.0.1:"), (line, self.proc.poll(), self.stderr)
        self.url = line.split()[1].split("url=", 1)[1]
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def port_is_free(port: int) -> bool:
    """Nobody listens there and a new server can bind it (SO_REUSEADDR, as servers do: connections the
    old server closed may linger in TIME_WAIT, which is not holding the port)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def read_stream(url: str, body: dict, out: dict, started: threading.Event) -> None:
    try:
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    out["done"] = True
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    if "error" in event:
                        out["error"] = event["error"]
                        continue
                    for choice in event["choices"]:
                        out["tokens"] = out.get("tokens", 0) + len(choice.get("token_ids", []))
                        out["finish"] = choice["finish_reason"] or out.get("finish")
                    if out.get("tokens", 0) >= 3:
                        started.set()
    except httpx.HTTPError as err:
        out["error"] = repr(err)
    finally:
        started.set()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_ends_streams_cleanly_exits_0_and_releases_the_port(sig):
    with Server("--drain-timeout", "1", "--batch", "2", "--time-scale", "5") as server:
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
        long_out, short_out = {}, {}
        long_started, short_started = threading.Event(), threading.Event()
        body = {"temperature": 0, "ignore_eos": True, "return_token_ids": True}
        readers = [
            threading.Thread(
                target=read_stream,
                args=(server.url, {**body, "prompt": "long", "max_tokens": 8000}, long_out, long_started),
            ),
            threading.Thread(
                target=read_stream,
                args=(server.url, {**body, "prompt": "short", "max_tokens": 60}, short_out, short_started),
            ),
        ]
        follow_out: dict = {}

        def follow() -> None:
            with httpx.stream("GET", server.url + "/v1/events?follow=1", timeout=60) as r:
                follow_out["lines"] = sum(1 for _ in r.iter_lines())
            follow_out["ended"] = True

        readers.append(threading.Thread(target=follow))
        readers[2].start()
        readers[0].start()
        assert long_started.wait(30)
        readers[1].start()
        assert short_started.wait(30)
        stop_began = time.monotonic()
        assert server.stop(sig) == 0, server.stderr
        stop_took = time.monotonic() - stop_began
        for reader in readers:
            reader.join(30)
        # Within the drain time the short stream finishes normally; the long one is stopped at the end of it
        # with an error event that names the shutdown (never a silent cut, never a normal-looking finish).
        assert short_out == {"status": 200, "tokens": 60, "finish": "length", "done": True}, short_out
        assert long_out["done"] and long_out.get("finish") is None and 3 <= long_out["tokens"] < 8000, long_out
        assert long_out["error"]["type"] == "server_shutdown" and "shutting down" in long_out["error"]["message"]
        assert follow_out["ended"] and follow_out["lines"] > 0  # the event feed ends with the server
        assert port_is_free(server.port)
        assert server.proc.stdout.read() == ""  # stdout carries the ready line only
        print(f"{sig!r}: stopped in {stop_took:.2f} s with two streams in flight (--drain-timeout 1)")


def test_serve_answers_and_honours_the_api_key_from_the_environment():
    with Server(env={"STRATA_API_KEY": "k-123"}) as server:
        assert httpx.get(server.url + "/health").status_code == 200
        assert httpx.get(server.url + "/v1/models").status_code == 401
        r = httpx.post(
            server.url + "/v1/completions",
            headers={"Authorization": "Bearer k-123"},
            json={"prompt": "hi", "max_tokens": 4, "temperature": 0, "ignore_eos": True},
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        info = httpx.get(server.url + "/v1/engine", headers={"Authorization": "Bearer k-123"}).json()
        assert info["executor"] == "sim" and info["ctx"] == 8192
        assert server.stop() == 0


def run_cli(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_serve_refuses_a_public_host_without_an_api_key_and_a_taken_port():
    r = run_cli("serve", "--host", "0.0.0.0", "--port", "0", *SIM)
    assert r.returncode == 2 and "--api-key" in r.stderr and r.stdout == ""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("serve", "--port", str(port), *SIM)
    assert r.returncode == 1 and f"127.0.0.1:{port}" in r.stderr and "STRATA_READY" not in r.stdout


@pytest.mark.parametrize(
    "args,words",
    [
        (["--batch-groups", "zero"], "integer or 'auto'"),
        (["--batch", "0"], "--batch"),
        (["--split", "2", "--devices", "a,b,c"], "two entries"),
        (["--executor", "tpu"], "--executor"),
    ],
)
def test_bad_engine_flags_are_usage_errors(args, words):
    r = run_cli("serve", "--port", "0", *args)
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_a_model_that_fails_to_load_exits_1_without_a_ready_line(tmp_path):
    r = run_cli("serve", "--port", "0", "--executor", "torch", "--model", str(tmp_path / "missing"), timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "STRATA_READY" not in r.stdout and "missing" in r.stderr


def test_help_explains_every_flag_and_the_environment_variables():
    from strata_engine.config import ENV_VARS

    text = run_cli("serve", "--help").stdout
    for flag in (
        "--model",
        "--batch",
        "--batch-groups",
        "--split",
        "--devices",
        "--prefill-chunk",
        "--ctx",
        "--executor",
        "--sim-profile",
        "--time-scale",
        "--device",
        "--dtype",
        "--seed",
        "--threads",
        "--host",
        "--port",
        "--api-key",
        "--drain-timeout",
        "--max-body-bytes",
    ):
        assert flag in text, flag
    for name in ENV_VARS:
        assert name in text, name
    assert "STRATA_API_KEY" in text and "STRATA_READY" in text


def test_generate_streams_the_python_apis_greedy_output():
    from strata_engine.engine import Engine
    from strata_engine.params import SamplingParams

    engine = Engine.from_pretrained(executor="sim", time_scale=50.0, ctx=8192, log_events=False)
    with engine:
        want = engine.generate(["tell me"], SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))[0]
    ids = ",".join(map(str, want.token_ids))
    r = subprocess.run(
        [EXE, "generate", "tell me", "--max-tokens", "10", "--ignore-eos", "--show-ids", *SIM],
        capture_output=True,
        timeout=60,
    )  # bytes: the sim's text may hold \r, no newline translation
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == want.text + "\n" + ids + "\n"
    assert b"10 tokens" in r.stderr and b"finish_reason=length" in r.stderr
    ids_prompt = ",".join(map(str, want.prompt_token_ids))
    r = run_cli("generate", ids_prompt, "--prompt-ids", "--show-ids", "--max-tokens", "10", "--ignore-eos", *SIM)
    assert r.stdout.endswith(ids + "\n"), r.stderr
    r = run_cli("generate", "", *SIM)
    assert r.returncode == 2 and "prompt" in r.stderr.lower()
