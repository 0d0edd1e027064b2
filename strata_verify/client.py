"""The gate's view of one server: its facts, and greedy streaming completions in the server's own words.

Built on the shared client (strata_bench.engines): `probe` decides the server family, `Family.request_body`
makes temperature 0 truly greedy there (neutral penalties, no top-k/top-p cut), asks for token ids and
logprobs where the family offers them, keeps requests off the prefix cache where it can (`cold`), and
sends request ids in a form the server accepts. A `Completion` is the shared StreamResult: every token id
with its client-clock (perf_counter) arrival time and logprob. A failure is a `GateError` (exit status 2).

Two variants of the same body: `Sampling` (temperature > 0 with a seed, top-p; the field's seeded-sampling
check) and `whole()` (the same request not streamed: one JSON response, read by the same wire parser, so
stream and non-stream answers compare field for field).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from strata_bench.engines.families import STRATA, Family
from strata_bench.engines.probe import ServerInfo, probe
from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import StreamTask as _SharedTask
from strata_bench.engines.wire import apply_event, error_body_detail

Completion = StreamResult
PROBE_PROMPT_TEXT = "Hello"


@dataclass(frozen=True)
class Sampling:
    """Seeded sampling instead of greedy: the body's temperature, top_p and seed (each family takes these names).

    The default draws off the argmax at 15 of the interleave check's S's 32 tokens on the embedded model (seed 2050
    drew none: the model repeats one confident token once it has drawn it)."""

    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 7

    def describe(self) -> str:
        return f"temperature {self.temperature:g}, top_p {self.top_p:g}, seed {self.seed}"


class GateError(RuntimeError):
    """The gate could not run (engine unreachable, died, or lacks what the gate needs): exit status 2."""

    def __init__(self, message: str, stderr_tail: list[str] | None = None):
        super().__init__(message)
        self.stderr_tail = stderr_tail or []


def facts(server: ServerInfo) -> dict[str, Any]:
    """What the checks read about a server: Strata's GET /v1/engine as served, else the probed facts."""
    if server.family is STRATA and server.engine:
        return {"family": STRATA.name, **server.engine}
    return {
        "family": server.family_name,
        "model": server.model,
        "vocab_size": server.vocab_size,
        "eos_token_id": server.eos_token_id,
        "ctx": server.ctx,
        "batch": server.slots,
        "server": server.engine or {},
    }


class EngineClient:
    """Talks to one server URL. `prepare()` probes it once; `complete`/`task` send greedy completions."""

    def __init__(self, url: str, request_timeout: float = 600.0):
        self.url = url.rstrip("/")
        self.request_timeout = request_timeout
        self.logprobs_ok = True
        self.server: ServerInfo | None = None

    @property
    def family(self) -> Family:
        return self.server.family if self.server else STRATA

    @property
    def cold(self) -> str | None:
        """How every request keeps off the server's prefix cache (None when it has no switch)."""
        return self.family.cold_description

    def info(self) -> dict[str, Any]:
        if self.server is None:
            self.server = probe(self.url)
        return facts(self.server)

    def prepare(self) -> dict[str, Any]:
        """Probe the server, then make sure one completion works, with logprobs if it takes them."""
        try:
            info = self.info()
        except Exception as exc:  # httpx errors, odd JSON: the gate cannot talk to it
            raise GateError(f"cannot probe {self.url}: {type(exc).__name__}: {exc}") from exc
        prompt: list[int] | str = [1, 2, 3] if self.server.supports_token_ids else PROBE_PROMPT_TEXT
        answer = self.complete("probe", "verify-probe-x-0", prompt, max_tokens=1)
        if answer.error and "logprob" in answer.error.lower():
            self.logprobs_ok = False
            answer = self.complete("probe", "verify-probe-x-0", prompt, max_tokens=1)
        if answer.error:
            raise GateError(f"the server's first completion failed ({self.server.describe()}): {answer.error}")
        if not answer.token_ids and not answer.text:
            raise GateError(
                f"the server's first completion returned neither token ids nor text ({self.server.describe()})"
            )
        return info

    def payload(
        self, prompt: list[int] | str, max_tokens: int, cold: bool = True, sampling: Sampling | None = None
    ) -> dict[str, Any]:
        """The greedy body (seeded sampling with `sampling`); `cold=False` lets the server's prefix cache serve it
        (the cache check's sessions)."""
        body = self.family.request_body(
            prompt,
            max_tokens,
            model=self.server.model if self.server else None,
            logprobs=2 if self.logprobs_ok else None,
            cold=cold,
        )
        if sampling is not None:
            body.update(temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed)
        return body

    def task(
        self,
        name: str,
        request_id: str,
        prompt: list[int] | str,
        max_tokens: int,
        cold: bool = True,
        sampling: Sampling | None = None,
    ) -> "StreamTask":
        family = self.family
        result = Completion(name=name, request_id=request_id, max_tokens=max_tokens)
        return StreamTask(
            self.url,
            self.payload(prompt, max_tokens, cold, sampling),
            result,
            path=family.endpoint,
            wire=family.wire,
            headers=family.headers(request_id),
            timeout=self.request_timeout,
        )

    def complete(
        self, name: str, request_id: str, prompt: list[int] | str, max_tokens: int, sampling: Sampling | None = None
    ) -> Completion:
        """One completion, start to end, in this thread."""
        return self.task(name, request_id, prompt, max_tokens, sampling=sampling).run()

    def whole(
        self, name: str, request_id: str, prompt: list[int] | str, max_tokens: int, sampling: Sampling | None = None
    ) -> Completion:
        """The same request as `complete`, not streamed: one JSON response, parsed as one event of the family's
        wire form (all tokens share one arrival stamp). A failure is recorded in the Completion, never raised."""
        family = self.family
        body = {**self.payload(prompt, max_tokens, True, sampling), "stream": False}
        body.pop("stream_options", None)  # vLLM refuses stream_options without stream
        result = Completion(name=name, request_id=request_id, max_tokens=max_tokens)
        result.sent_at = time.perf_counter()
        try:
            response = httpx.post(
                self.url + family.endpoint,
                content=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", **family.headers(request_id)},
                timeout=httpx.Timeout(self.request_timeout, connect=30.0),
            )
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            result.ended_by = "error"
            return result
        result.http_status = response.status_code
        result.ended_at = time.perf_counter()
        if response.status_code != 200:
            result.error = (
                f"HTTP {response.status_code} from POST {family.endpoint}: "
                f"{error_body_detail(response.content) or '(empty body)'}"
            )
        else:
            apply_event(result, response.text, result.ended_at, family.wire)
            if result.error is None and result.finish_reason is None:
                result.error = "the response has no finish_reason"
        result.ended_by = "error" if result.error else "finished"
        return result


class StreamTask(_SharedTask):
    """The shared threaded stream; `request_id` is the readable id events and fault proxies know."""

    @property
    def request_id(self) -> str:
        return self.result.request_id
