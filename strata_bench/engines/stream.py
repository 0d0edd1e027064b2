"""The streaming client: one completion request, every token stamped on arrival, for bench and verify alike.

`stream_completion` is a coroutine over the lean HTTP/1.1 client (`http_stream.py`: ~50 us of CPU per
event, stamps taken when the event loop woke); the bench runs many on one loop. `StreamTask` runs one in
its own thread and loop, for the gate's thread-per-request style, with `first_token`/`finished` events and
`cancel()`. Failures (HTTP status, an error event, a dropped connection, a stream that ends without a
finish_reason) are recorded in the StreamResult, never raised.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Callable

from .families import OPENAI_WIRE
from .http_stream import HTTPStreamError, post_stream, run
from .result import StreamResult
from .wire import apply_event, error_body_detail

OnEvent = Callable[[Any, float], None]  # (parsed event, arrival perf_counter)


class SSEDecoder:
    """Incremental server-sent-events parser: bytes in, the `data` payload of each complete event out."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        out = []
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            data = [line[5:].lstrip(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data).decode("utf-8", errors="replace"))
        return out


async def stream_completion(
    url: str,
    body: dict[str, Any] | bytes,
    result: StreamResult,
    *,
    path: str = "/v1/completions",
    wire: str = OPENAI_WIRE,
    headers: dict[str, str] | None = None,
    on_event: OnEvent | None = None,
    connect_timeout: float = 30.0,
) -> StreamResult:
    """POST url+path and fill `result` as tokens arrive.

    `body` is a dict (stream=true is added) or JSON bytes encoded beforehand, so that a 64K-token prompt's
    encoding does not delay its send time; pre-encoded bodies must already ask for stream=true.
    """
    if isinstance(body, dict):
        body = json.dumps({**body, "stream": True}).encode()
    send_headers = {"Accept-Encoding": "identity", "Content-Type": "application/json", **(headers or {})}
    decoder = SSEDecoder()
    error_body: list[bytes] = []

    def on_head(status: int) -> None:
        result.http_status = status

    def on_body(data: bytes, arrived: float) -> bool:
        if result.http_status != 200:
            error_body.append(data)
            return False
        for payload in decoder.feed(data):
            if payload.strip() == "[DONE]":
                return True
            event = apply_event(result, payload, arrived, wire)
            if on_event is not None:  # after the tokens are counted, so the hook sees them
                on_event(event, arrived)
            if result.error is not None:
                return True
        return False

    result.sent_at = time.perf_counter()
    try:
        stream = await post_stream(
            url, path, body, send_headers, on_body, on_head=on_head, connect_timeout=connect_timeout
        )
        if stream.status != 200:
            detail = error_body_detail(b"".join(error_body))
            result.error = f"HTTP {stream.status} from POST {path}: {detail or '(empty body)'}"
        else:
            result.check_end()
    except asyncio.CancelledError:
        result.ended_by, result.cancelled = "cancelled", True
        raise
    except (OSError, asyncio.TimeoutError, HTTPStreamError) as exc:
        result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        result.ended_at = time.perf_counter()
        if result.ended_by is None:
            result.ended_by = "error" if result.error else "finished"
        _check_usage(result)
    return result


def _check_usage(result: StreamResult) -> None:
    """A server whose usage counts more tokens than its events showed packs tokens we cannot see."""
    completion = (result.usage or {}).get("completion_tokens")
    if isinstance(completion, int) and completion != len(result.times) and result.ended_by == "finished":
        result.warnings.append(f"counted {len(result.times)} tokens in events, the server's usage says {completion}")


class StreamTask:
    """One streaming completion in its own thread and event loop; `cancel()` closes its stream, and a
    `timeout` ends one whose server sends nothing for that many seconds (an error)."""

    def __init__(
        self,
        url: str,
        body: dict[str, Any],
        result: StreamResult,
        *,
        path: str = "/v1/completions",
        wire: str = OPENAI_WIRE,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ):
        self.url, self.body, self.result = url, body, result
        self.path, self.wire, self.headers, self.timeout = path, wire, headers, timeout
        self.first_token = threading.Event()
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._thread: threading.Thread | None = None

    def start(self) -> "StreamTask":
        self._thread = threading.Thread(target=self.run, name=f"stream-{self.result.name}", daemon=True)
        self._thread.start()
        return self

    def run(self) -> StreamResult:
        """Stream to the end in this thread."""
        try:
            run(self._main())
        except asyncio.CancelledError:
            pass
        finally:
            self.first_token.set()  # nobody waits forever on a stream that failed before its first token
            self.finished.set()
        return self.result

    async def _main(self) -> None:
        def on_event(_event: Any, _arrived: float) -> None:
            if self.result.times:
                self.first_token.set()

        with self._lock:
            if self._cancelled:
                self.result.ended_by, self.result.cancelled = "cancelled", True
                return
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
        streaming = asyncio.ensure_future(
            stream_completion(
                self.url,
                self.body,
                self.result,
                path=self.path,
                wire=self.wire,
                headers=self.headers,
                on_event=on_event,
            )
        )
        try:
            await self._watch(streaming)
        finally:
            if not streaming.done():
                streaming.cancel()
                await asyncio.gather(streaming, return_exceptions=True)

    async def _watch(self, streaming: "asyncio.Future[StreamResult]") -> None:
        """Wait for the stream; with a timeout, a stream silent (no event) that long is ended as an error."""
        seen, quiet_since = -1, time.perf_counter()
        while not streaming.done():
            await asyncio.wait([streaming], timeout=min(1.0, self.timeout or 1.0))
            if self.result.events != seen:
                seen, quiet_since = self.result.events, time.perf_counter()
            elif self.timeout is not None and time.perf_counter() - quiet_since > self.timeout:
                streaming.cancel()
                await asyncio.gather(streaming, return_exceptions=True)
                self.result.error = f"the server sent nothing for {self.timeout:g} s"
                self.result.ended_by, self.result.cancelled = "error", False
                return
        streaming.result()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._loop is not None and self._task is not None and not self.finished.is_set():
                try:
                    self._loop.call_soon_threadsafe(self._task.cancel)
                except RuntimeError:  # the loop already closed: the stream is over
                    pass

    def join(self, timeout: float | None = None) -> StreamResult:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result
