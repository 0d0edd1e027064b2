"""HTTP client of the gate: engine facts, and greedy streaming completions with per-token arrival times.

Each completion streams (`return_token_ids`, `temperature 0`, `ignore_eos`, `logprobs 2` when the
engine takes it) in its own thread so several can run at once; `Completion` keeps every token id,
its client-clock arrival time and its logprobs. A lost connection is a `GateError` (exit status 2).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


class GateError(RuntimeError):
    """The gate could not run (engine unreachable, died, or lacks what the gate needs): exit status 2."""

    def __init__(self, message: str, stderr_tail: list[str] | None = None):
        super().__init__(message)
        self.stderr_tail = stderr_tail or []


@dataclass
class Completion:
    """One streamed answer. Times are `time.monotonic()` seconds on the gate's clock."""

    name: str
    request_id: str
    sent_at: float = 0.0
    token_ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    token_texts: list[str | None] = field(default_factory=list)  # the chosen tokens' text, as top_logprobs keys them
    text: str = ""
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    engine_id: str | None = None  # the `id` the engine gave (cmpl-<request_id>)
    cancelled: bool = False
    error: str | None = None
    done_at: float | None = None

    @property
    def first_token_at(self) -> float | None:
        return self.times[0] if self.times else None

    def tokens_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.times if start <= t <= end)


class EngineClient:
    """Talks to one engine URL. `info()` is GET /v1/engine ({} when the server has none)."""

    def __init__(self, url: str, request_timeout: float = 600.0):
        self.url = url.rstrip("/")
        self.request_timeout = request_timeout
        self.logprobs_ok = True
        self.model: str | None = None

    def _get(self, path: str) -> httpx.Response:
        try:
            return httpx.get(f"{self.url}{path}", timeout=30.0)
        except httpx.HTTPError as exc:
            raise GateError(f"GET {self.url}{path} failed: {exc!r}") from exc

    def info(self) -> dict[str, Any]:
        resp = self._get("/v1/engine")
        return resp.json() if resp.status_code == 200 else {}

    def prepare(self) -> dict[str, Any]:
        """Read the engine's facts and the model name, then find out whether logprobs are accepted."""
        info = self.info()
        models = self._get("/v1/models")
        if models.status_code == 200:
            data = models.json().get("data") or []
            self.model = data[0].get("id") if data else None
        probe = self.complete("probe", "verify-probe", [1, 2, 3] if info else "Hello", max_tokens=1)
        if probe.error and "logprobs" in probe.error:
            self.logprobs_ok = False
            probe = self.complete("probe", "verify-probe", [1, 2, 3] if info else "Hello", max_tokens=1)
        if probe.error:
            raise GateError(f"the engine's first completion failed: {probe.error}")
        if not probe.token_ids:
            raise GateError("the engine returned no token_ids (strata-verify needs `return_token_ids: true`)")
        return info

    def payload(self, prompt: list[int] | str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                                "return_token_ids": True, "stream": True}
        if self.logprobs_ok:
            body["logprobs"] = 2
        if self.model:
            body["model"] = self.model
        return body

    def complete(self, name: str, request_id: str, prompt: list[int] | str, max_tokens: int) -> Completion:
        """One completion, start to end, in this thread."""
        task = StreamTask(self, name, request_id, prompt, max_tokens)
        task.run()
        return task.result


class StreamTask:
    """A streaming completion that can run in a thread and be cancelled (its stream is closed)."""

    def __init__(self, client: EngineClient, name: str, request_id: str, prompt: list[int] | str, max_tokens: int):
        self.client = client
        self.result = Completion(name=name, request_id=request_id)
        self.body = client.payload(prompt, max_tokens)
        self.first_token = threading.Event()
        self.finished = threading.Event()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "StreamTask":
        self._thread = threading.Thread(target=self.run, name=f"verify-{self.result.name}", daemon=True)
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    def join(self, timeout: float | None = None) -> Completion:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result

    def run(self) -> None:
        out = self.result
        headers = {"X-Request-Id": out.request_id}
        timeout = httpx.Timeout(self.client.request_timeout, connect=30.0)
        try:
            with httpx.Client(timeout=timeout) as http:
                out.sent_at = time.monotonic()
                with http.stream("POST", f"{self.client.url}/v1/completions", json=self.body, headers=headers) as resp:
                    if resp.status_code != 200:
                        resp.read()
                        out.error = f"HTTP {resp.status_code}: {resp.text[:500]}"
                        return
                    for line in resp.iter_lines():
                        if self._cancel.is_set():
                            out.cancelled = True
                            return
                        if self._take_line(line):
                            return
            if out.finish_reason is None and out.error is None:
                out.error = "stream ended without finish_reason or [DONE]"
        except httpx.HTTPError as exc:
            if not self._cancel.is_set():
                out.error = f"connection lost: {exc!r}"
        finally:
            out.done_at = time.monotonic()
            self.first_token.set()  # nobody waits forever on a stream that failed before its first token
            self.finished.set()

    def _take_line(self, line: str) -> bool:
        """Record one SSE line; True at [DONE] or an error event."""
        if not line.startswith("data:"):
            return False
        data = line[5:].strip()
        if data == "[DONE]":
            return True
        now = time.monotonic()
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            self.result.error = f"bad SSE data: {data[:200]}"
            return True
        if "error" in event:
            self.result.error = str(event["error"].get("message", event["error"]))
            return True
        self.result.engine_id = self.result.engine_id or event.get("id")
        for choice in event.get("choices") or []:
            self._take_choice(choice, now)
        return False

    def _take_choice(self, choice: dict[str, Any], now: float) -> None:
        out = self.result
        ids = choice.get("token_ids")
        if choice.get("prompt_token_ids") is not None:
            out.prompt_token_ids = list(choice["prompt_token_ids"])
        out.text += choice.get("text") or ""
        if ids:
            lp = choice.get("logprobs") or {}
            token_lps = lp.get("token_logprobs") or []
            tops = lp.get("top_logprobs") or []
            texts = lp.get("tokens") or []
            for i, token in enumerate(ids):
                out.token_ids.append(int(token))
                out.times.append(now)
                out.logprobs.append(token_lps[i] if i < len(token_lps) else None)
                out.top_logprobs.append(tops[i] if i < len(tops) else None)
                out.token_texts.append(texts[i] if i < len(texts) else None)
            self.first_token.set()
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
