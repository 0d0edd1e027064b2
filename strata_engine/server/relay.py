"""The bridge between one engine request and the event loop that answers its HTTP client.

`Relay.submit` hands the request to the engine; the engine thread's `on_output` only schedules the
item onto the loop (`call_soon_threadsafe`), so the engine never waits on a client. When the client
goes away (`http.disconnect`, or a failed send) the relay cancels the engine request, which stops
it at the next boundary and frees its slot. `EventStream` is the SSE response that watches for that.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .errors import APIError

if TYPE_CHECKING:
    from .state import ServerState

_GONE = object()  # queued when the client disconnects, so a waiting reader wakes at once


class Mailbox:
    """Items from the engine thread to the event loop with at most one wake-up pending: a decode step
    that samples a token for every slot wakes the loop once, not once per token."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.items: deque[tuple["Relay", Any]] = deque()
        self.pending = False

    def post(self, relay: "Relay", item: Any) -> None:  # engine thread
        self.items.append((relay, item))
        if not self.pending:
            self.pending = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the server's loop is closed: nobody is left to deliver to
                pass

    def _drain(self) -> None:  # event loop
        self.pending = False  # before popping: an item posted from now on schedules its own drain
        items = self.items
        while items:
            relay, item = items.popleft()
            relay._deliver(item)


class Relay:
    """One engine request seen from the event loop: a queue of TokenOutput items ending in Finished."""

    def __init__(self, state: "ServerState", request_id: str | None = None):
        self.state = state
        self.request_id = request_id or uuid.uuid4().hex
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.handle: Any = None
        self.finished: Any = None  # the engine's Completion once Finished arrived
        self.client_gone = False
        self.stopped_by: str | None = None  # why the server cancelled it (shutdown); None = the client did
        self.submitted_at = time.monotonic()
        self._last_t: float | None = None

    def submit(self, prompt: str | list[int], params: Any) -> None:
        """Raises RequestError (a 400) or anything the engine raises (a 500); nothing is queued then."""
        self.submitted_at = time.monotonic()
        self.handle = self.state.engine.submit(prompt, params, request_id=self.request_id, on_output=self._on_output)
        self.request_id = self.handle.request_id
        self.state.relays[self.request_id] = self

    # engine thread: keep it cheap
    def _on_output(self, item: Any) -> None:
        self.state.mailbox.post(self, item)

    # event loop
    def _deliver(self, item: Any) -> None:
        metrics = self.state.metrics
        completion = getattr(item, "completion", None)
        if completion is not None:
            self.finished = completion
            self.state.relays.pop(self.request_id, None)
            metrics.finished(completion.finish_reason, len(completion.prompt_token_ids), len(completion.token_ids))
        else:
            if self._last_t is None:
                metrics.first_token(time.monotonic() - self.submitted_at)
            else:
                metrics.token_gap(item.t - self._last_t)
            self._last_t = item.t
        self.queue.put_nowait(item)

    def disconnect(self) -> None:
        """The client went away: stop the engine request and wake whoever waits on the queue."""
        if self.client_gone:
            return
        self.client_gone = True
        if self.finished is None:
            self.state.metrics.disconnects.inc()
            self.cancel()
        self.queue.put_nowait(_GONE)

    def cancel(self, reason: str | None = None) -> None:
        """Stop the engine request; `reason` (the server's, e.g. a shutdown) ends its stream with an error event."""
        if self.handle is not None and self.finished is None:
            self.stopped_by = self.stopped_by or reason
            self.handle.cancel()

    async def next(self) -> Any:
        """The next TokenOutput or Finished; None once the client is gone."""
        item = await self.queue.get()
        return None if item is _GONE else item

    def next_nowait(self) -> Any:
        """Like next() but without waiting: None when nothing is queued yet."""
        try:
            item = self.queue.get_nowait()
        except asyncio.QueueEmpty:
            return None
        return None if item is _GONE else item

    async def completion(self, receive: Receive) -> Any:
        """Wait for the end (non-streaming); a disconnect meanwhile cancels the request. None if gone."""
        watcher = asyncio.ensure_future(watch_disconnect(receive, self.disconnect))
        try:
            while True:
                item = await self.next()
                if item is None:
                    return None
                if getattr(item, "completion", None) is not None:
                    return item.completion
        finally:
            watcher.cancel()


async def watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    """Call on_disconnect when the client closes its connection (the body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


class EventStream(Response):
    """Server-sent events from an async iterator of bytes; stops (and cancels the relay) on disconnect."""

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[bytes], relay: Relay, headers: dict[str, str] | None = None):
        # Like StreamingResponse: no body attribute, so no Content-Length header.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})
        self.chunks = chunks
        self.relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(watch_disconnect(receive, self.relay.disconnect))
        try:
            # Headers wait for the first event so a request that fails at once still gets a plain 500.
            try:
                first = await self.chunks.__anext__()
            except StopAsyncIteration:
                return
            except APIError as err:
                await err.response()(scope, receive, send)
                return
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": first, "more_body": True})
            async for chunk in self.chunks:
                if self.relay.client_gone:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not self.relay.client_gone:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the transport broke under a send: the same as a disconnect
            self.relay.disconnect()
        finally:
            watcher.cancel()
            if self.relay.finished is None:  # ended early for any reason: never leave a slot busy
                self.relay.cancel()
            await self.chunks.aclose()  # type: ignore[attr-defined]


def sse(payload: bytes | str) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return b"data: " + payload + b"\n\n"
