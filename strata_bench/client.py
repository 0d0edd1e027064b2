"""Streaming client: one OpenAI-compatible completion request, every token timestamped on arrival.

The timestamp (time.perf_counter, monotonic) is taken when the bytes carrying an SSE event arrive. An
event carrying k tokens (`token_ids`, else logprobs `tokens`, else 1 for non-empty text) counts k tokens
with that one timestamp, so a server that packs tokens cannot fake small gaps. Failures (HTTP status,
an error event, a dropped connection) are recorded in the RequestResult, never raised.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .http_stream import HTTPStreamError, post_stream

OnEvent = Callable[[dict[str, Any], float], None]  # (parsed event, arrival perf_counter)


@dataclass
class RequestResult:
    """Filled in while the request streams, so a cancelled or failed request keeps what it got."""

    name: str
    role: str
    prompt_tokens: int
    prompt_sha256: str = ""
    sent_at: float | None = None
    first_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] | None = None  # None when the server gave no ids
    text: str = ""
    finish_reason: str | None = None
    ended_at: float | None = None
    ended_by: str | None = None  # "finished" | "cancelled" | "error"
    error: str | None = None
    http_status: int | None = None
    usage: dict[str, Any] | None = None
    events: int = 0
    warnings: list[str] = field(default_factory=list)

    def add_tokens(self, count: int, at: float, ids: list[int] | None) -> None:
        if count <= 0:
            return
        if self.first_token_at is None:
            self.first_token_at = at
        self.token_times.extend([at] * count)
        if ids is not None:
            if self.token_ids is None:
                self.token_ids = []
            self.token_ids.extend(ids)

    def to_dict(self, origin: float) -> dict[str, Any]:
        """JSON form with times in seconds since `origin` (the run's start), to the microsecond."""

        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin, 6)

        return {
            "name": self.name, "role": self.role, "prompt_tokens": self.prompt_tokens,
            "prompt_sha256": self.prompt_sha256, "sent_at": rel(self.sent_at),
            "first_token_at": rel(self.first_token_at), "ended_at": rel(self.ended_at),
            "ended_by": self.ended_by, "error": self.error, "http_status": self.http_status,
            "finish_reason": self.finish_reason, "tokens": len(self.token_times), "events": self.events,
            "usage": self.usage, "warnings": self.warnings, "text": self.text, "token_ids": self.token_ids,
            "token_times": [round(t - origin, 6) for t in self.token_times],
        }


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


def choice_tokens(choice: dict[str, Any]) -> tuple[int, list[int] | None, str]:
    """(token count, token ids or None, text) of one streamed choice (completion or chat chunk)."""
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or {}).get("content") or ""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids), [int(i) for i in ids], text
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if tokens is None and isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        tokens = logprobs["content"]  # chat form: one entry per token
    if isinstance(tokens, list):
        return len(tokens), None, text
    return (1 if text else 0), None, text


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message") or payload["error"])
    return str(payload)[:300]


async def stream_completion(
    url: str,
    body: dict[str, Any] | bytes,
    result: RequestResult,
    *,
    headers: dict[str, str] | None = None,
    on_event: OnEvent | None = None,
    connect_timeout: float = 30.0,
) -> RequestResult:
    """POST url/v1/completions and fill `result` as tokens arrive.

    `body` is a dict (stream=true is added) or JSON bytes encoded beforehand, so that a 64K-token prompt's
    encoding does not delay its send time; pre-encoded bodies must already ask for stream=true.
    """
    if isinstance(body, dict):
        body = json.dumps({**body, "stream": True}).encode()
    send_headers = {"Accept-Encoding": "identity", "Content-Type": "application/json", **(headers or {})}
    decoder = SSEDecoder()
    error_body: list[bytes] = []
    saw_done = False

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
                return True
            _apply_event(result, payload, arrived, on_event)
        return False

    result.sent_at = time.perf_counter()
    try:
        stream = await post_stream(url, "/v1/completions", body, send_headers, on_body, on_head=on_head,
                                   connect_timeout=connect_timeout)
        if stream.status != 200:
            raw = b"".join(error_body)
            try:
                detail = _error_message(json.loads(raw))
            except ValueError:
                detail = raw.decode("utf-8", errors="replace")[:300]
            result.error = f"HTTP {stream.status}: {detail}"
        elif not saw_done and result.finish_reason is None and result.error is None:
            result.error = "the stream ended without [DONE] or a finish_reason"
    except asyncio.CancelledError:
        result.ended_by = "cancelled"
        raise
    except (OSError, asyncio.TimeoutError, HTTPStreamError) as exc:
        result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        result.ended_at = time.perf_counter()
        if result.ended_by is None:
            result.ended_by = "error" if result.error else "finished"
        _check_usage(result)
    return result


def _apply_event(result: RequestResult, data: str, arrived: float, on_event: OnEvent | None) -> None:
    result.events += 1
    try:
        payload = json.loads(data)
    except ValueError:
        result.warnings.append(f"unparseable event: {data[:120]!r}")
        return
    if isinstance(payload, dict):
        if "error" in payload:
            result.error = f"error event: {_error_message(payload)}"
        if payload.get("usage"):
            result.usage = payload["usage"]
        for choice in payload.get("choices") or []:
            count, ids, text = choice_tokens(choice)
            result.add_tokens(count, arrived, ids)
            result.text += text
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
    if on_event is not None:  # after the tokens are counted, so the hook sees them
        on_event(payload, arrived)


def _check_usage(result: RequestResult) -> None:
    """A server whose usage counts more tokens than its events showed packs tokens we cannot see."""
    completion = (result.usage or {}).get("completion_tokens")
    if isinstance(completion, int) and completion != len(result.token_times) and result.ended_by == "finished":
        result.warnings.append(
            f"counted {len(result.token_times)} tokens in events, the server's usage says {completion}"
        )
