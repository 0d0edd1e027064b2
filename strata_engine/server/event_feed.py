"""GET /v1/events: the engine's event log as JSON lines (`?since=N`, `?follow=1`).

Each line is `{"index": i, "kind": ..., "t": ..., "slot": ..., "request_id": ..., ...fields}` with the
absolute index i >= N; the `X-Strata-Next-Index` header gives the N to ask for next. With follow the
response stays open and each new event is one more line; it ends when the server shuts down.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from .state import ServerState
from .errors import APIError
from .render import dumps

router = APIRouter()
MEDIA_TYPE = "application/x-ndjson"
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def _lines(events: list[Any], next_index: int) -> bytes:
    first = next_index - len(events)
    return "".join(dumps({"index": first + i, **e.to_dict()}) + "\n" for i, e in enumerate(events)).encode()


def _query(request: Request) -> tuple[int, bool]:
    raw_since = request.query_params.get("since", "0")
    try:
        since = int(raw_since)
    except ValueError:
        raise APIError(400, f"since must be a non-negative integer, got {raw_since!r}", "since") from None
    if since < 0:
        raise APIError(400, f"since must be a non-negative integer, got {since}", "since")
    raw_follow = request.query_params.get("follow", "0").lower()
    if raw_follow not in TRUE + FALSE:
        raise APIError(400, f"follow must be 1 or 0, got {raw_follow!r}", "follow")
    unknown = sorted(set(request.query_params) - {"since", "follow"})
    if unknown:
        raise APIError(400, f"unknown query parameter '{unknown[0]}': use since and follow", unknown[0])
    return since, raw_follow in TRUE


@router.get("/v1/events")
async def events(request: Request) -> Response:
    state: ServerState = request.app.state.strata
    since, follow = _query(request)
    log = state.require_engine().events
    batch, next_index = log.since(since)
    headers = {"X-Strata-Next-Index": str(next_index)}
    if not follow:
        return Response(_lines(batch, next_index), media_type=MEDIA_TYPE, headers=headers)
    return StreamingResponse(
        _follow(state, log, batch, next_index), media_type=MEDIA_TYPE, headers={**headers, "Cache-Control": "no-cache"}
    )


async def _follow(state: ServerState, log: Any, batch: list[Any], next_index: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    # Called on the engine thread: only schedule the wake-up; the lines are read from the log here.
    unsubscribe = log.subscribe(lambda _event: loop.call_soon_threadsafe(wake.set))
    state.wakers.add(wake)
    wake.set()  # events emitted between the route's read and the subscription are picked up at once
    try:
        if batch:
            yield _lines(batch, next_index)
        while not state.draining:
            await wake.wait()
            wake.clear()
            batch, next_index = log.since(next_index)
            if batch:
                yield _lines(batch, next_index)
    finally:
        unsubscribe()
        state.wakers.discard(wake)
