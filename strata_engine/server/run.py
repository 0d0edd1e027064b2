"""Run the app on uvicorn: bind first (port 0 = a free one), load the engine, print the ready line.

`STRATA_READY url=http://HOST:PORT kernels=OP:PATH,...` goes to stdout, once, flushed, when the port is bound and the
engine is loaded; everything else (uvicorn, engine events) goes to stderr. SIGTERM/SIGINT: new
requests get 503, requests in flight get `drain_timeout` seconds to finish, then are cancelled so
their streams end with a finish_reason and [DONE]; the port is closed and the process exits 0.
A second SIGINT quits at once.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
import time
from typing import Any, Callable, TextIO

import uvicorn

from .app import DEFAULT_MAX_BODY_BYTES, create_app

log = logging.getLogger("strata_engine.server")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; a clear error when the address is taken or not ours."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise OSError(f"cannot resolve --host {host!r}: {err}") from None
    family, _, _, _, address = infos[0]
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an accepted socket only when its proto says
    # TCP, and without it a reused connection's first token waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def ready_url(host: str, sock: socket.socket) -> str:
    """The URL a client on this machine uses: a wildcard bind is reached through loopback."""
    port = sock.getsockname()[1]
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    """uvicorn's server with our shutdown: drain the app, then exit 0 instead of re-raising the signal."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None], on_exit: Callable[[], None]):
        super().__init__(config)
        self._on_started = on_started
        self._on_exit = on_exit

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._on_started()

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        getattr(self, "_captured_signals", []).clear()
        self._on_exit()


def ready_line(url: str, kernels: dict[str, dict] | None) -> str:
    """`STRATA_READY url=URL kernels=chunk-attention:native,...`: which path serves each native op."""
    paths = ",".join(f"{label.replace(' ', '-')}:{v['path'].replace(' ', '-')}" for label, v in (kernels or {}).items())
    return f"STRATA_READY url={url}" + (f" kernels={paths}" if paths else "")


def serve(
    engine: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    drain_timeout: float = 30.0,
    log_level: str = "warning",
    out: TextIO | None = None,
) -> int:
    """Serve until a signal; returns the exit status (0 after a clean shutdown, 1 if loading failed).
    `engine` is an Engine or a zero-argument callable that builds one (loaded while /health says 503)."""
    out = out or sys.stdout
    began = time.monotonic()
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, log_level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sock = bind(host, port)
    url = ready_url(host, sock)
    flags = {"started": False, "printed": False}
    server: _Server | None = None

    def maybe_ready() -> None:
        state = app.state.strata
        if state.load_error and server is not None:
            server.should_exit = True
            return
        if flags["started"] and state.ready and not flags["printed"]:
            flags["printed"] = True
            out.write(ready_line(url, state.engine.info().get("kernels") if state.engine is not None else None) + "\n")
            out.flush()
            log.info("serving %s at %s", state.model_name, url)
            compiled = state.engine.info().get("compiled") if state.engine is not None else None
            steps = (
                f"; of it compiling the decode step: {compiled['compile_s']:.1f} s, {compiled['graphs']} graph(s)"
                if compiled
                else ""
            )
            print(f"strata-engine: ready in {time.monotonic() - began:.1f} s{steps}", file=sys.stderr, flush=True)

    def started() -> None:
        flags["started"] = True
        maybe_ready()

    def exiting() -> None:
        state = app.state.strata
        loop = state.loop
        if loop is not None:
            loop.call_soon_threadsafe(state.start_draining, drain_timeout)

    app = create_app(
        engine,
        model_name=model_name,
        api_key=api_key,
        max_body_bytes=max_body_bytes,
        manage_engine=True,
        on_ready=lambda: maybe_ready(),
    )
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(drain_timeout) + 10,
        timeout_keep_alive=30,
    )
    server = _Server(config, on_started=started, on_exit=exiting)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    state = app.state.strata
    if state.load_error:
        print(f"strata-engine: {state.load_error}", file=sys.stderr)
        return 1
    return 0


def run_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> tuple[str, Callable[[], None]]:
    """For tests and benchmarks: serve `app` from a background thread; returns (url, stop)."""
    import threading

    sock = bind(host, port)
    url = ready_url(host, sock)
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="strata-http", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the HTTP server thread died during startup")
        threading.Event().wait(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(15)
        sock.close()

    return url, stop


__all__ = ["serve", "ready_line", "run_in_thread", "bind", "ready_url", "is_loopback"]
