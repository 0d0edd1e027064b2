"""Load runs' streaming client: one request on a new or a kept-alive HTTP/1.1 connection, every event stamped.

The one adapter between load runs and the project's streaming client: client.py's StreamResult, SSE
decoder and event counting, http_stream.py's response framing and arrival stamps. `send_request` is the
only call load runs make to it (re-point it at the shared client when that gains keep-alive and chat).
With keep-alive a ConnectionPool keeps sockets open between requests (each response is read to its framed
end, so the next one starts clean); without it every request opens a connection and closes it, as the
bench always did. Both go through the same code, so the only difference measured is the reuse.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..engines.families import OPENAI_WIRE
from ..engines.http_stream import HTTPStreamError, ResponseStream
from ..engines.result import StreamResult
from ..engines.stream import SSEDecoder, _check_usage
from ..engines.wire import apply_event, error_body_detail


class Connection(asyncio.Protocol):
    """One HTTP/1.1 socket; the response being read gets its bytes, one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.current: ResponseStream | None = None
        self.closed = False
        self.responses = 0  # responses read on this socket so far: > 0 means a reuse

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.current is not None:
            self.current.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.current is not None:
            self.current.connection_lost(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


@dataclass
class ConnectionPool:
    """Idle connections to one server; `keepalive=False` opens one per request and closes it after."""

    url: str
    keepalive: bool
    connect_timeout: float = 30.0
    opened: int = 0
    _idle: list[Connection] = field(default_factory=list)

    async def acquire(self, fresh: bool = False) -> Connection:
        while self.keepalive and self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        parts = urlsplit(self.url)
        if parts.scheme != "http":
            raise ValueError(f"load runs speak plain http, got {self.url!r}")
        loop = asyncio.get_running_loop()
        conn = Connection()
        await asyncio.wait_for(
            loop.create_connection(lambda: conn, parts.hostname or "127.0.0.1", parts.port or 80), self.connect_timeout
        )
        self.opened += 1
        return conn

    def release(self, conn: Connection, reusable: bool) -> None:
        if self.keepalive and reusable and not conn.closed:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


@dataclass
class Sent:
    """What one request left: the client's record, each token-carrying event's arrival, whether its socket was reused."""

    result: StreamResult
    chunk_times: list[float]
    reused_connection: bool
    retried: bool = False


def _request_bytes(pool: ConnectionPool, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    parts = urlsplit(pool.url)
    head = [
        f"POST {parts.path.rstrip('/')}{path} HTTP/1.1",
        f"Host: {parts.netloc}",
        f"Content-Length: {len(body)}",
        "Connection: " + ("keep-alive" if pool.keepalive else "close"),
        "Accept-Encoding: identity",
        "Content-Type: application/json",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def send_request(
    pool: ConnectionPool,
    path: str,
    body: bytes,
    result: StreamResult,
    *,
    headers: dict[str, str] | None = None,
    wire: str = OPENAI_WIRE,
) -> Sent:
    """POST a pre-encoded streaming body to `path` and fill `result` as events arrive; failures are recorded.

    The send time is taken before a connection is taken from the pool, so a new connection's handshake is
    in the TTFT (as AIPerf and vLLM measure). A reused socket the server closed while idle is retried once
    on a new one (recorded), since no byte of the request reached the server.
    """
    chunk_times: list[float] = []
    result.sent_at = time.perf_counter()
    sent = Sent(result, chunk_times, reused_connection=False)
    try:
        request = _request_bytes(pool, path, body, headers or {})
        conn = await pool.acquire()
        sent.reused_connection = conn.responses > 0
        if await _exchange(conn, pool, request, result, chunk_times, wire):  # stale: once more on a new socket
            sent.retried = True
            conn = await pool.acquire(fresh=True)
            await _exchange(conn, pool, request, result, chunk_times, wire)
    except asyncio.CancelledError:
        result.ended_by = "cancelled"
        raise
    except (OSError, asyncio.TimeoutError, HTTPStreamError) as exc:
        result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        if result.ended_at is None:
            result.ended_at = time.perf_counter()
        if result.ended_by is None:
            result.ended_by = "error" if result.error else "finished"
        _check_usage(result)
    return sent


async def _exchange(
    conn: Connection, pool: ConnectionPool, request: bytes, result: StreamResult, chunk_times: list[float], wire: str
) -> bool:
    """One request/response on `conn`; True when the socket turned out closed before any response byte."""
    decoder = SSEDecoder()
    error_body: list[bytes] = []
    saw_done = False

    counted = [len(result.times)]

    def on_event(_: Any, arrived: float) -> None:
        if len(result.times) > counted[0]:  # this event carried tokens: one chunk, one arrival
            chunk_times.append(arrived)
            counted[0] = len(result.times)

    def on_head(status: int) -> None:
        result.http_status = status

    def on_body(data: bytes, arrived: float) -> bool:
        nonlocal saw_done
        if result.http_status != 200:
            error_body.append(data)
            return False
        for payload in decoder.feed(data):
            if payload.strip() == "[DONE]":
                saw_done = True
                result.ended_at = arrived  # the stream's end; the framing's last bytes may follow
                continue
            apply_event(result, payload, arrived, wire)
            on_event(None, arrived)
        return False  # read to the framed end: a kept-alive socket must start the next response clean

    stream = ResponseStream(on_body, on_head)
    conn.current = stream
    reusable = False
    try:
        if conn.closed or conn.transport is None:
            raise ConnectionResetError("the kept-alive connection was closed")
        conn.transport.write(request)
        await stream.done
        conn.responses += 1
        reusable = stream._mode in ("chunked", "length") and stream.headers.get("connection", "").lower() != "close"
    except (ConnectionResetError, BrokenPipeError) as exc:
        if stream.status is None and conn.responses > 0:
            return True
        raise exc
    finally:
        conn.current = None
        pool.release(conn, reusable)
    if stream.status != 200:
        detail = error_body_detail(b"".join(error_body))
        result.error = f"HTTP {stream.status}: {detail}"
    elif not saw_done and result.finish_reason is None and result.error is None:
        result.error = "the stream ended without [DONE] or a finish_reason"
    return False
