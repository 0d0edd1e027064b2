"""The FastAPI app factory: `create_app(engine, *, model_name, api_key, max_body_bytes)`.

The app holds no engine logic: it validates, hands requests to `Engine.submit`, streams the result,
and cancels on disconnect (docs/API.md is the contract). `engine` may be a started Engine, or a
zero-argument callable that builds one; the app then loads it in a thread at startup, answers
`/health` with 503 until it is ready, starts it, and shuts it down with the app.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from . import errors
from .errors import APIError
from .gate import Gate
from .metrics import CONTENT_TYPE, ServerMetrics

log = logging.getLogger("strata_engine.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # a 262K-token id list is ~2 MB of JSON


def _version() -> str:
    try:
        return metadata.version("strata")
    except metadata.PackageNotFoundError:
        return "0.0.0+local"


@dataclass
class ServerState:
    """Everything the routes share; one per app."""

    model_name: str | None
    api_key: str | None
    max_body_bytes: int
    engine: Any = None
    ready: bool = False
    load_error: str | None = None
    draining: bool = False
    started_at: int = field(default_factory=lambda: int(time.time()))
    relays: dict = field(default_factory=dict)  # request_id -> Relay, requests in flight
    wakers: set = field(default_factory=set)  # asyncio.Events of open /v1/events?follow streams
    metrics: ServerMetrics = None  # type: ignore[assignment]
    loop: asyncio.AbstractEventLoop | None = None
    mailbox: Any = None  # relay.Mailbox of the serving loop
    on_ready: Callable[[], None] | None = None
    slots_total: int | None = None
    _unsubscribe: Callable[[], None] | None = None

    def attach(self, engine: Any) -> None:
        self.engine = engine
        if not self.model_name:
            self.model_name = engine.model_name
        self._unsubscribe = engine.events.subscribe(self.metrics.on_event)
        self.slots_total = engine.info().get("batch")
        self.ready = True

    def require_engine(self) -> Any:
        if self.draining:
            raise APIError(503, "the server is shutting down; send this request elsewhere")
        if not self.ready:
            raise APIError(503, self.load_error or "the model is still loading; retry when GET /health is 200")
        return self.engine

    def check_model(self, name: str | None) -> None:
        if name and name != self.model_name:
            raise APIError(404, f"model '{name}' does not exist; this server serves '{self.model_name}'", "model",
                           "not_found_error")

    def stats(self) -> dict[str, Any]:
        """engine.stats() plus the four standard gauges, derived from the scheduler's counts when the
        engine reports phases (waiting/reading/parked/decoding, free_slots) instead."""
        if not self.ready:
            return {}
        stats = dict(self.engine.stats())
        total = stats.setdefault("slots_total", self.slots_total)
        if "free_slots" in stats and total is not None:
            stats.setdefault("slots_busy", total - stats["free_slots"])
        if "waiting" in stats:
            stats.setdefault("queue_len", stats["waiting"])
        if all(k in stats for k in ("reading", "parked", "decoding")):
            stats.setdefault("requests_running", stats["reading"] + stats["parked"] + stats["decoding"])
        return {k: v for k, v in stats.items() if v is not None}

    def start_draining(self, timeout_s: float) -> None:
        """Shutdown began: refuse new requests, end event feeds, and cancel what still runs after timeout_s."""
        if self.draining:
            return
        self.draining = True
        for wake in list(self.wakers):
            wake.set()
        if self.relays:
            log.warning("shutting down: %d request(s) in flight get %.1f s to finish", len(self.relays), timeout_s)
        if self.loop is None or timeout_s <= 0:
            self.cancel_all()
        else:
            self.loop.call_later(timeout_s, self.cancel_all)

    def cancel_all(self) -> None:
        for relay in list(self.relays.values()):
            relay.cancel()

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past `limit` bytes (checked before and while reading), else 400."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body is {declared} bytes; the limit is {limit} (--max-body-bytes)", "body")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"request body is over the limit of {limit} bytes (--max-body-bytes)", "body")
    if not body:
        raise APIError(400, "request body is empty; send a JSON object", "body")
    try:
        obj = json.loads(bytes(body), parse_constant=_no_constants)
    except UnicodeDecodeError as err:
        raise APIError(400, f"request body is not UTF-8: {err}", "body") from None
    except ValueError as err:
        raise APIError(400, f"malformed JSON: {err}", "body") from None
    if not isinstance(obj, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(obj).__name__}", "body")
    return obj


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def create_app(engine: Any, *, model_name: str | None = None, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, manage_engine: bool | None = None,
               on_ready: Callable[[], None] | None = None) -> FastAPI:
    """`engine`: an Engine (started by the caller unless manage_engine=True) or a callable returning one
    (always managed: loaded in a thread, started, shut down with the app). `on_ready` runs on the event
    loop once the engine is ready."""
    if max_body_bytes < 1024:
        raise ValueError(f"max_body_bytes must be >= 1024, got {max_body_bytes}")
    loader = engine if callable(engine) and not hasattr(engine, "submit") else None
    managed = loader is not None or bool(manage_engine)
    state = ServerState(model_name=model_name, api_key=api_key or None, max_body_bytes=max_body_bytes, on_ready=on_ready)
    state.metrics = ServerMetrics(state.stats)

    def ready(eng: Any) -> None:
        if managed:
            eng.start()
        state.attach(eng)
        log.info("model %s ready", state.model_name)
        if on_ready is not None:
            on_ready()

    async def load() -> None:
        try:
            eng = await asyncio.to_thread(loader)
            ready(eng)
        except Exception as err:  # the server stays up to say why on /health; run.py exits on it
            log.exception("loading the engine failed")
            state.load_error = f"loading the engine failed: {type(err).__name__}: {err}"
            if on_ready is not None:
                on_ready()

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        from .relay import Mailbox

        state.loop = asyncio.get_running_loop()
        state.mailbox = Mailbox(state.loop)
        if loader is not None:
            task = asyncio.ensure_future(load())
        elif managed:
            ready(engine)
        elif on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            state.start_draining(0)
            state.detach()
            if loader is not None and not task.done():
                task.cancel()
            if managed and state.engine is not None:
                await asyncio.to_thread(state.engine.shutdown)

    if loader is None and not managed:
        state.attach(engine)
    app = FastAPI(title="strata-engine", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.strata = state
    errors.install(app)
    _basic_routes(app, state)
    from . import events, routes  # the endpoint modules import this one for read_json

    app.include_router(routes.router)
    app.include_router(events.router)
    app.add_middleware(Gate, state=state)
    return app


def _basic_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        if state.ready and not state.draining:
            return JSONResponse({"status": "ok"})
        if state.load_error:
            return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
        return JSONResponse({"status": "shutting_down" if state.draining else "loading"}, status_code=503)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        engine = state.require_engine()
        card = {"id": state.model_name, "object": "model", "created": state.started_at, "owned_by": "strata",
                "max_model_len": engine.ctx}
        return JSONResponse({"object": "list", "data": [card]})

    @app.get("/v1/engine")
    async def engine_info() -> JSONResponse:
        engine = state.require_engine()
        info = {"model": state.model_name, **engine.info(), "supports_token_ids": True, "version": _version()}
        return JSONResponse(info)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)
