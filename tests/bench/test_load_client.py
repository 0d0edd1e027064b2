"""The load client's connections: a kept-alive socket the server dropped is retried once on a new one, and
a new connection that fails is an error in the record, never an exception."""

from __future__ import annotations

import asyncio
import json

from strata_bench.engines.result import StreamResult
from strata_bench.engines.http_stream import run as run_stamped
from strata_bench.load.client import ConnectionPool, send_request

BODY = json.dumps({"prompt": [1, 2], "max_tokens": 2, "stream": True}).encode()


def sse_response(tokens: int) -> bytes:
    events = (
        b"".join(
            b"data: "
            + json.dumps(
                {
                    "choices": [
                        {"text": f" t{i}", "token_ids": [i], "finish_reason": "length" if i == tokens - 1 else None}
                    ]
                }
            ).encode()
            + b"\n\n"
            for i in range(tokens)
        )
        + b"data: [DONE]\n\n"
    )
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + chunked


async def serve_one_response_per_connection():
    """Each connection answers its first request, then drops the connection at the second without a reply:
    a server closing an idle kept-alive socket just as the client reuses it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            )
            await reader.readexactly(length)
            if served:
                writer.close()
                return
            writer.write(sse_response(2))
            await writer.drain()
            served += 1

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_a_dropped_kept_alive_socket_is_retried_once_on_a_new_one():
    async def main():
        server, url = await serve_one_response_per_connection()
        pool = ConnectionPool(url, keepalive=True)
        first = await send_request(pool, "/v1/completions", BODY, StreamResult("a", "load", prompt_tokens=2))
        second = await send_request(pool, "/v1/completions", BODY, StreamResult("b", "load", prompt_tokens=2))
        server.close()
        return first, second, pool.opened

    first, second, opened = run_stamped(main())
    assert first.result.error is None and len(first.chunk_times) == 2 and not first.retried
    assert second.reused_connection and second.retried  # the reuse failed, the retry went on a new socket
    assert second.result.error is None and second.result.token_ids == [0, 1] and opened == 2


def test_a_refused_connection_is_an_error_in_the_record():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await send_request(
            ConnectionPool(f"http://127.0.0.1:{port}", keepalive=True),
            "/v1/completions",
            BODY,
            StreamResult("a", "load", prompt_tokens=2),
        )

    sent = run_stamped(main())
    assert sent.result.ended_by == "error" and sent.result.error.startswith("ConnectionRefusedError")
    assert not sent.retried and sent.result.times == []
