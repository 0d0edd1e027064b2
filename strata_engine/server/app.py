"""The FastAPI app factory: `create_app(engine, *, model_name, api_key, max_body_bytes)`.

The app holds no engine logic: it validates, hands requests to `Engine.submit`, streams the result,
and cancels on disconnect (docs/API.md is the contract). `engine` may be a started Engine, or a
zero-argument callable that builds one; the app then loads it in a thread at startup, answers
`/health` with 503 until it is ready, starts it, and shuts it down with the app.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, Callable

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from ..engine_info import version
from . import errors
from .gate import Gate
from .metrics import CONTENT_TYPE, ServerMetrics
from .state import ServerState

log = logging.getLogger("strata_engine.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024  # a 262K-token id list is ~2 MB of JSON


def create_app(
    engine: Any,
    *,
    model_name: str | None = None,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    manage_engine: bool | None = None,
    on_ready: Callable[[], None] | None = None,
) -> FastAPI:
    """`engine`: an Engine (started by the caller unless manage_engine=True) or a callable returning one
    (always managed: loaded in a thread, started, shut down with the app). `on_ready` runs on the event
    loop once the engine is ready."""
    if max_body_bytes < 1024:
        raise ValueError(f"max_body_bytes must be >= 1024, got {max_body_bytes}")
    loader = engine if callable(engine) and not hasattr(engine, "submit") else None
    managed = loader is not None or bool(manage_engine)
    state = ServerState(
        model_name=model_name, api_key=api_key or None, max_body_bytes=max_body_bytes, on_ready=on_ready
    )
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
    app = FastAPI(
        title="strata-engine", version=version(), lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.strata = state
    errors.install(app)
    _basic_routes(app, state)
    from . import event_feed, routes

    app.include_router(routes.router)
    app.include_router(event_feed.router)
    app.add_middleware(Gate, state=state)
    return app


def _basic_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        fault = state.stage_fault() if state.ready else None
        if fault:
            return JSONResponse({"status": "error", "error": fault}, status_code=503)
        if state.ready and not state.draining:
            return JSONResponse({"status": "ok"})
        if state.load_error:
            return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
        return JSONResponse({"status": "shutting_down" if state.draining else "loading"}, status_code=503)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        engine = state.require_engine()
        card = {
            "id": state.model_name,
            "object": "model",
            "created": state.started_at,
            "owned_by": "strata",
            "max_model_len": engine.ctx,
        }
        return JSONResponse({"object": "list", "data": [card]})

    @app.get("/v1/engine")
    async def engine_info() -> JSONResponse:
        engine = state.require_engine()
        info = {"model": state.model_name, **engine.info(), "supports_token_ids": True, "version": version()}
        return JSONResponse(info)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)
