"""The gate's view of one server: its facts, and greedy streaming completions in the server's own words.

Built on the shared client (strata_bench.engines): `probe` decides the server family, `Family.request_body`
makes temperature 0 truly greedy there (neutral penalties, no top-k/top-p cut), asks for token ids and
logprobs where the family offers them, keeps requests off the prefix cache where it can (`cold`), and
sends request ids in a form the server accepts. A `Completion` is the shared StreamResult: every token id
with its client-clock (perf_counter) arrival time and logprob. A failure is a `GateError` (exit status 2).
"""
from __future__ import annotations

from typing import Any

from strata_bench.engines.families import STRATA, Family
from strata_bench.engines.probe import ServerInfo, probe
from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import StreamTask as _SharedTask

Completion = StreamResult
PROBE_PROMPT_TEXT = "Hello"


class GateError(RuntimeError):
    """The gate could not run (engine unreachable, died, or lacks what the gate needs): exit status 2."""

    def __init__(self, message: str, stderr_tail: list[str] | None = None):
        super().__init__(message)
        self.stderr_tail = stderr_tail or []


def facts(server: ServerInfo) -> dict[str, Any]:
    """What the checks read about a server: Strata's GET /v1/engine as served, else the probed facts."""
    if server.family is STRATA and server.engine:
        return {"family": STRATA.name, **server.engine}
    return {"family": server.family_name, "model": server.model, "vocab_size": server.vocab_size,
            "eos_token_id": server.eos_token_id, "ctx": server.ctx, "batch": server.slots,
            "server": server.engine or {}}


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
            raise GateError(f"the server's first completion returned neither token ids nor text ({self.server.describe()})")
        return info

    def payload(self, prompt: list[int] | str, max_tokens: int, cold: bool = True) -> dict[str, Any]:
        """The greedy body; `cold=False` lets the server's prefix cache serve it (the cache check's sessions)."""
        return self.family.request_body(prompt, max_tokens, model=self.server.model if self.server else None,
                                        logprobs=2 if self.logprobs_ok else None, cold=cold)

    def task(self, name: str, request_id: str, prompt: list[int] | str, max_tokens: int,
             cold: bool = True) -> "StreamTask":
        family = self.family
        result = Completion(name=name, request_id=request_id, max_tokens=max_tokens)
        return StreamTask(self.url, self.payload(prompt, max_tokens, cold), result, path=family.endpoint,
                          wire=family.wire, headers=family.headers(request_id), timeout=self.request_timeout)

    def complete(self, name: str, request_id: str, prompt: list[int] | str, max_tokens: int) -> Completion:
        """One completion, start to end, in this thread."""
        return self.task(name, request_id, prompt, max_tokens).run()


class StreamTask(_SharedTask):
    """The shared threaded stream; `request_id` is the readable id events and fault proxies know."""

    @property
    def request_id(self) -> str:
        return self.result.request_id
