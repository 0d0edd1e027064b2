"""A lean HTTP/1.1 client for one streaming POST, its bytes stamped with the time the event loop woke.

httpx costs ~100 us of CPU per SSE event (several async layers per chunk); at 64 streams that alone
delays arrivals by milliseconds. This asyncio.Protocol decodes the response (status, headers, chunked,
length-delimited or until close) and hands each body chunk to a callback with its arrival stamp. Under
`run()` (a StampingEventLoop) the stamp is the moment select() returned with the socket ready, so 64
streams whose tokens arrive together share one stamp instead of queueing behind each other's parsing;
elsewhere it is time.perf_counter() in the read callback. http and https; one request per connection.
"""

from __future__ import annotations

import asyncio
import selectors
import ssl
import time
from typing import Any, Callable, Coroutine, TypeVar
from urllib.parse import urlsplit

OnBody = Callable[[bytes, float], bool]  # (body bytes, arrival stamp) -> True when the caller has all it needs
OnHead = Callable[[int], None]  # the status code, before any body bytes


T = TypeVar("T")


class HTTPStreamError(Exception):
    """Malformed response framing."""


class _StampingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    woke_at = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(timeout)
        self.woke_at = time.perf_counter()
        return ready


class StampingEventLoop(asyncio.SelectorEventLoop):
    """A selector loop that remembers when each select() returned: the earliest user-space arrival time."""

    def __init__(self) -> None:
        self._stamping_selector = _StampingSelector()
        super().__init__(self._stamping_selector)

    def arrival_time(self) -> float:
        return self._stamping_selector.woke_at


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on a StampingEventLoop (Python 3.10's asyncio.run takes no loop factory)."""
    loop = StampingEventLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


class ResponseStream(asyncio.Protocol):
    def __init__(self, on_body: OnBody, on_head: OnHead | None = None):
        self.on_body = on_body
        self.on_head = on_head
        loop = asyncio.get_running_loop()
        self._clock = loop.arrival_time if isinstance(loop, StampingEventLoop) else time.perf_counter
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._mode = ""  # "chunked" | "length" | "close", once the head is parsed
        self._remaining = 0
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        stamp = self._clock()
        if self.done.done():  # the caller has what it needs; bytes already read are dropped
            return
        try:
            if self.status is None:
                self._head += data
                if b"\r\n\r\n" not in self._head:
                    return
                head, data = self._head.split(b"\r\n\r\n", 1)
                self._parse_head(head)
            self._body(data, stamp)
        except HTTPStreamError as exc:
            self._finish(exc)
        except Exception as exc:  # a callback's failure ends this request, not the event loop
            self._finish(HTTPStreamError(f"handling the response failed: {type(exc).__name__}: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._mode == "close" and exc is None:
            self._finish(None)
        else:
            self._finish(exc or ConnectionResetError("the server closed the connection before the response ended"))

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise HTTPStreamError(f"not an HTTP response: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()
        if self.on_head is not None:
            self.on_head(self.status)
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in self.headers:
            self._mode, self._remaining = "length", int(self.headers["content-length"])
        else:
            self._mode = "close"

    def _body(self, data: bytes, stamp: float) -> None:
        if self._mode == "chunked":
            self._buf += data
            data, ended = self._dechunk()
        elif self._mode == "length":
            data = data[: self._remaining]
            self._remaining -= len(data)
            ended = self._remaining == 0
        else:
            ended = False
        if data and self.on_body(data, stamp):
            ended = True
        if ended:
            self._finish(None)

    def _dechunk(self) -> tuple[bytes, bool]:
        out = []
        while True:
            line_end = self._buf.find(b"\r\n")
            if line_end < 0:
                return b"".join(out), False
            try:
                size = int(self._buf[:line_end].split(b";")[0], 16)
            except ValueError:
                raise HTTPStreamError(f"bad chunk size line {self._buf[:line_end][:40]!r}") from None
            if size == 0:
                return b"".join(out), True
            if len(self._buf) < line_end + 2 + size + 2:
                return b"".join(out), False
            start = line_end + 2
            out.append(self._buf[start : start + size])
            self._buf = self._buf[start + size + 2 :]

    def _finish(self, exc: Exception | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


async def post_stream(
    url: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    on_body: OnBody,
    *,
    on_head: OnHead | None = None,
    connect_timeout: float = 30.0,
) -> ResponseStream:
    """POST and feed the response body to `on_body` until it returns True or the body ends."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)
    prefix = parts.path.rstrip("/")
    head = [
        f"POST {prefix}{path} HTTP/1.1",
        f"Host: {parts.netloc}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    loop = asyncio.get_running_loop()
    stream = ResponseStream(on_body, on_head)
    context = ssl.create_default_context() if secure else None
    transport, _ = await asyncio.wait_for(
        loop.create_connection(lambda: stream, host, port, ssl=context), connect_timeout
    )
    try:
        transport.write(request)
        await stream.done
    finally:
        transport.close()
    return stream
