"""What the routes share: `ServerState` (one per app) and `read_json` (a bounded JSON body).

Its own module so the route modules import it without importing the app factory (no import cycle).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import Request

from .errors import APIError
from .metrics import ServerMetrics

log = logging.getLogger("strata_engine.server")


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
        fault = self.stage_fault()
        if fault:
            raise APIError(503, f"{fault}; retry when GET /health is 200")
        return self.engine

    def stage_fault(self) -> str | None:
        """What is wrong with the engine's pipeline stages (a stage rank dead, hung or restarting), or None."""
        pipeline = getattr(getattr(self.engine, "executor", None), "pipeline", None)
        health = getattr(pipeline, "health", None)
        return health() if health is not None else None

    def check_model(self, name: str | None) -> None:
        if name and name != self.model_name:
            raise APIError(
                404,
                f"model '{name}' does not exist; this server serves '{self.model_name}'",
                "model",
                "not_found_error",
            )

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

    def cancel_all(self, reason: str = "the server is shutting down") -> None:
        for relay in list(self.relays.values()):
            relay.cancel(reason)

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
