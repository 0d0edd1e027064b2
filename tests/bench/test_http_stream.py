"""The lean HTTP/1.1 response decoder, fed by hand at awkward byte boundaries."""

import asyncio

import pytest

from strata_bench.engines.http_stream import HTTPStreamError, ResponseStream, StampingEventLoop, run

CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"9\r\ndata: a\n\n\r\n"
    b"9\r\ndata: b\n\n\r\n"
    b"0\r\n\r\n"
)


def feed(pieces, stop_on=None):
    """Feed the pieces into a ResponseStream; returns (stream, [(body, stamp)], outcome)."""

    async def go():
        got = []

        def on_body(data, stamp):
            got.append((data, stamp))
            return stop_on is not None and stop_on in data

        stream = ResponseStream(on_body)
        for piece in pieces:
            stream.data_received(piece)
        if not stream.done.done():
            stream.connection_lost(None)
        try:
            await stream.done
            outcome = "ok"
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
            outcome = exc
        return stream, got, outcome

    return asyncio.run(go())


@pytest.mark.parametrize("cut", [1, 3, 7, 50, 64, 1000])
def test_chunked_body_at_any_split(cut):
    pieces = [CHUNKED[i : i + cut] for i in range(0, len(CHUNKED), cut)]
    stream, got, outcome = feed(pieces)
    assert outcome == "ok" and stream.status == 200
    assert b"".join(d for d, _ in got) == b"data: a\n\ndata: b\n\n"
    assert stream.headers["content-type"] == "text/event-stream"


def test_content_length_and_error_status():
    body = b'{"error": {"message": "bad"}}'
    stream, got, outcome = feed([b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body) + body])
    assert outcome == "ok" and stream.status == 400 and b"".join(d for d, _ in got) == body


def test_caller_can_stop_early_and_close_delimited_bodies_end_on_close():
    first = CHUNKED.index(b"9\r\ndata: b")
    stream, got, outcome = feed([CHUNKED[:first], CHUNKED[first:]], stop_on=b"data: a")
    assert outcome == "ok" and [d for d, _ in got] == [b"data: a\n\n"]
    stream, got, outcome = feed([b"HTTP/1.0 200 OK\r\n\r\nhello", b" world"])
    assert outcome == "ok" and b"".join(d for d, _ in got) == b"hello world"


def test_broken_responses_are_errors():
    _, _, outcome = feed([b"SSH-2.0-OpenSSH\r\n\r\n"])
    assert isinstance(outcome, HTTPStreamError)
    _, _, outcome = feed([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
    assert isinstance(outcome, HTTPStreamError) and "chunk size" in str(outcome)
    _, _, outcome = feed([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\ndata"])  # cut mid-body
    assert isinstance(outcome, ConnectionResetError)


def test_a_failing_callback_ends_the_request_not_the_loop():
    async def go():
        stream = ResponseStream(lambda data, stamp: 1 / 0)
        stream.data_received(CHUNKED)
        with pytest.raises(HTTPStreamError, match="ZeroDivisionError"):
            await stream.done

    asyncio.run(go())


def test_under_run_the_stamp_is_the_loops_wake_time():
    async def go():
        loop = asyncio.get_running_loop()
        assert isinstance(loop, StampingEventLoop)
        await asyncio.sleep(0)  # one select() has returned
        stamps = []
        stream = ResponseStream(lambda data, stamp: stamps.append(stamp) or False)
        stream.data_received(b"HTTP/1.1 200 OK\r\n\r\nx")
        stream.data_received(b"y")
        return stamps, loop.arrival_time()

    stamps, woke = run(go())
    assert stamps == [woke, woke]  # two reads in one loop iteration share the wake time
