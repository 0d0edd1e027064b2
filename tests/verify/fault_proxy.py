"""A real HTTP proxy in front of an engine that injects the faults strata-verify exists to catch.

    python tests/verify/fault_proxy.py --mode perturb --request C --index 3 -- strata-engine serve ...

It starts the engine command after `--` on a free port (or forwards to `--upstream URL`) and serves
the same API. Trailing `--host H --port P` (what the gate's launcher appends) are the proxy's own.
Modes (requests are matched by the name inside the gate's X-Request-Id, e.g. `verify-interleave-C-..`):
  pass      forward unchanged
  perturb   change token `--index` of request `--request`, only while other requests are in flight
  drift     change token `--index` of request `--request` on every start after the first (`--state FILE`)
  no-yield  hold each new completion until every earlier one has its first token: no read is ever
            interrupted, so the engine never gives way
  die       after `--after N` completions the engine is killed and the proxy exits with an error
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from strata_bench.engines.launcher import with_port  # noqa: E402
from strata_bench.engines import ports  # noqa: E402
from strata_verify.requests import name_of  # noqa: E402


def split_own_address(child: list[str]) -> tuple[list[str], str, int | None]:
    """Take trailing `--host H` / `--port P` pairs off the child command: they are the proxy's."""
    host, port = "127.0.0.1", None
    while len(child) >= 2 and child[-2] in ("--host", "--port"):
        if child[-2] == "--host":
            host = child[-1]
        else:
            port = int(child[-1])
        child = child[:-2]
    return child, host, port


class Proxy:
    def __init__(self, args: argparse.Namespace, upstream: str, perturbing: bool):
        self.args = args
        self.upstream = upstream
        self.perturbing = perturbing  # drift: only starts after the first perturb
        self.in_flight: set[str] = set()
        self.reading: set[str] = set()  # forwarded, no first token yet
        self.completions = 0
        self.child: subprocess.Popen | None = None

    def should_perturb(self, rid: str) -> bool:
        if name_of(rid) != self.args.request:
            return False
        if self.args.mode == "perturb":
            return len(self.in_flight - {rid}) > 0
        return self.args.mode == "drift" and self.perturbing

    def rewrite(self, line: str, state: dict) -> str:
        if not line.startswith("data:") or line.strip() == "data: [DONE]":
            return line
        event = json.loads(line[5:])
        for choice in event.get("choices") or []:
            ids = choice.get("token_ids") or []
            for i, token in enumerate(ids):
                if state["perturb"] and state["index"] == self.args.index:
                    ids[i] = token ^ 1  # a neighbouring id: always a different token
                state["index"] += 1
        return "data: " + json.dumps(event)


def build_app(proxy: Proxy) -> FastAPI:
    app = FastAPI()
    client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=30.0))

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.body()
        rid = request.headers.get("x-request-id") or f"anon-{time.monotonic_ns()}"
        proxy.completions += 1
        if proxy.args.mode == "die" and proxy.completions > proxy.args.after:
            print(
                "fault_proxy: engine crashed: CUDA error: an illegal memory access was encountered",
                file=sys.stderr,
                flush=True,
            )
            if proxy.child is not None:
                proxy.child.kill()
            os._exit(9)
        if proxy.args.mode == "no-yield":
            while proxy.reading:
                await asyncio.sleep(0.005)
        state = {"perturb": proxy.should_perturb(rid), "index": 0}
        proxy.in_flight.add(rid)
        proxy.reading.add(rid)
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in ("x-request-id", "content-type", "authorization")
        }
        upstream = await client.send(
            client.build_request("POST", f"{proxy.upstream}/v1/completions", content=body, headers=headers), stream=True
        )

        async def relay():
            try:
                async for line in upstream.aiter_lines():
                    if line.startswith("data:"):
                        proxy.reading.discard(rid)
                        state["perturb"] = state["perturb"] or proxy.should_perturb(rid)
                    yield proxy.rewrite(line, state) + "\n"
            finally:
                proxy.in_flight.discard(rid)
                proxy.reading.discard(rid)
                await upstream.aclose()

        if upstream.status_code != 200:
            content = await upstream.aread()
            proxy.in_flight.discard(rid)
            proxy.reading.discard(rid)
            return Response(content, status_code=upstream.status_code, media_type="application/json")
        return StreamingResponse(relay(), media_type=upstream.headers.get("content-type", "text/event-stream"))

    @app.get("/{path:path}")
    async def forward(path: str, request: Request):
        upstream = await client.send(
            client.build_request("GET", f"{proxy.upstream}/{path}", params=request.query_params), stream=True
        )
        headers = {k: v for k, v in upstream.headers.items() if k.lower().startswith("x-strata")}

        async def relay():
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(
            relay(), status_code=upstream.status_code, headers=headers, media_type=upstream.headers.get("content-type")
        )

    return app


def start_child(child: list[str], attempts: int = 3) -> tuple[subprocess.Popen, str]:
    """The engine on a free port once /health answers from it; on a port another process took first
    (ports.listener_is_ours), again on a new one (ports.start_ours)."""

    def launch(port: int) -> subprocess.Popen:
        # exec: the shell becomes the engine, so killing proc kills the engine. No session of its own: the
        # engine stays in this proxy's process group, which the launcher's SIGTERM reaches. Its stdout goes
        # to our stderr: the gate must read this proxy's address, not the engine's STRATA_READY line.
        command = "exec " + with_port(shlex.join(child), port)
        return subprocess.Popen(command, shell=True, stdout=sys.stderr, stderr=sys.stderr)

    def answers(port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()

    def retrying(port: int) -> None:
        print(f"fault_proxy: another process holds port {port}; starting again", file=sys.stderr, flush=True)

    try:
        proc, port, _ = ports.start_ours(launch, answers, stop, timeout_s=600, tries=attempts, retrying=retrying)
    except ports.Taken:
        sys.exit(f"fault_proxy: every port tried ({attempts}) was taken by another process")
    except ports.Exited as exc:
        print(f"fault_proxy: engine exited with status {exc.code} before it was ready", file=sys.stderr, flush=True)
        sys.exit(exc.code or 1)
    except ports.TimedOut:
        sys.exit("fault_proxy: engine not ready in 600 s")
    return proc, f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, child = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description="fault-injecting proxy for strata-verify tests")
    parser.add_argument("--mode", choices=("pass", "perturb", "drift", "no-yield", "die"), default="pass")
    parser.add_argument("--request", default="C", help="request name to perturb (A-E, p1-p6)")
    parser.add_argument("--index", type=int, default=0, help="token index to perturb")
    parser.add_argument("--state", help="drift: file counting starts")
    parser.add_argument("--after", type=int, default=1, help="die: completions served before the crash")
    parser.add_argument("--upstream", help="forward to this URL instead of starting an engine")
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(own)
    child, host, port = split_own_address(child)
    host, port = args.host or host, args.port or port
    if port is None:
        parser.error("no port: give --port or let the launcher append --host/--port")
    starts = 1
    if args.mode == "drift":
        if not args.state:
            parser.error("--mode drift needs --state FILE")
        path = Path(args.state)
        starts = int(path.read_text() or 0) + 1 if path.exists() else 1
        path.write_text(str(starts))
    proc, upstream = (None, args.upstream.rstrip("/")) if args.upstream else start_child(child)
    proxy = Proxy(args, upstream, perturbing=starts > 1)
    proxy.child = proc
    try:  # the launcher's SIGTERM goes to the whole process group: this proxy and its engine
        uvicorn.run(build_app(proxy), host=host, port=port, log_level="warning")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
