"""The engine: requests in, tokens out, on one scheduler thread.

Contract: `submit` validates a request synchronously (a bad one raises `RequestError` naming the
field and disturbs nothing else), then the scheduler thread reads, decodes and delivers each token
through the handle (and `on_output`) the moment it is sampled. The engine knows tokenization, decides
once per token whether it ends its request (`finish.finish_reason`: EOS, max tokens, the context's end)
and postprocesses text (stop strings); the scheduler knows neither, the executor only runs plans.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
import traceback
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from .config import EngineConfig
from .heap import hand_back
from .engine_info import describe, kv_info
from .events import EventLog
from .finish import finish_reason
from .tokens import SampledToken, TokenSampler
from .outputs import Completion, Finished, RequestHandle, RequestState, TokenOutput
from .errors import RequestError
from .params import SamplingParams
from .scheduler.request import Request
from .scheduler.scheduler import Scheduler

if TYPE_CHECKING:
    from .layout import Machine

__all__ = ["Engine", "Completion", "TokenOutput", "Finished", "RequestHandle", "SamplingParams", "RequestError"]


_event_log = logging.getLogger("strata_engine.events")


def _stderr_echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _log_echo(line: str) -> None:
    # A library stays quiet: events reach the `logging` module (and the event feed), shown only where
    # the application turns DEBUG on for "strata_engine.events".
    if _event_log.isEnabledFor(logging.DEBUG):
        _event_log.debug("%s", line)


def config_for(
    name_or_path: str,
    layout: str = "plain",
    config: Mapping[str, Any] | None = None,
    machine: Machine | Callable[[EngineConfig], Machine] | None = None,
) -> EngineConfig:
    """The EngineConfig `Engine.from_pretrained(name_or_path, layout, **config)` builds. `plain` is the fields as
    given; `fastest` and `auto` resolve as `serve --layout` does (layout.resolve), the fields passed being the flags
    given: `fastest` beside one of layout.SHAPING raises the CLI's ValueError, `auto` beside one stays plain.
    `machine` stands in for this machine (layout.this_machine). The one-line why goes to the engine's log."""
    given = dict(config or {})
    flagged = EngineConfig(model=name_or_path, **given)
    if layout == "plain":
        return flagged
    from .layout import resolve

    laid_out, why = resolve(flagged, layout, given=set(given), env=flagged.env, machine=machine)
    _log_echo(f"layout {why}")
    return laid_out


class Engine:
    def __init__(self, config: EngineConfig):
        from .resolved import resolve

        resolved = resolve(config)  # the flags, the STRATA_* variables, the model's config and the memory: once
        self.config, self.ctx_choice, self.scheduler_config = resolved.config, resolved.ctx_choice, resolved.scheduler
        self.events = EventLog(echo=_stderr_echo if config.log_events else _log_echo)
        self.clock = time.monotonic
        if config.executor == "sim":
            from .backends import build_sim

            backend = build_sim(resolved, self.clock)
        else:
            from .backends import build_torch

            backend = build_torch(resolved)
        self.executor = backend.executor
        self.tokenizer = backend.tokenizer
        self.model_name = backend.model_name
        self.device, self.dtype = backend.device, backend.dtype
        self.vocab_size = backend.vocab_size
        self.eos_token_id = backend.eos_token_id
        self.stage_workers = backend.stage_workers
        self.kernels = backend.kernels
        self.ctx = self.scheduler_config.ctx
        self.scheduler = Scheduler(
            self.scheduler_config, self.executor, clock=self.clock, sink=self, events=self.events
        )
        self._states: dict[str, RequestState] = {}
        self._handles: dict[str, RequestHandle] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._seeds = itertools.count(self.config.seed * 1_000_003 + 1)
        hand_back()  # what start-up freed goes back to the OS before the first request

    @classmethod
    def from_pretrained(cls, name_or_path: str = "strata-tiny-moe", layout: str = "plain", **config: Any) -> "Engine":
        """An engine for a model name or folder, in `layout`: `plain` (the default) builds the fields as given;
        `fastest` and `auto` lay it out as `strata-engine serve --layout` does (`config_for`)."""
        return cls(config_for(name_or_path, layout, config))

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> "Engine":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="strata-scheduler", daemon=True)
            self._thread.start()
        return self

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                worked = self.scheduler.step()
            except Exception:  # the scheduler fails single requests itself; this is a last resort
                traceback.print_exc()
                worked = False
            if not worked:
                self._wake.wait(0.02)
                self._wake.clear()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel what is left, stop the scheduler thread, release the executor."""
        with self._lock:
            pending = list(self._handles)
        for request_id in pending:
            self.cancel(request_id)
        deadline = time.monotonic() + timeout
        while self._thread is not None and self._handles and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.01)
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for request_id in list(self._handles):  # the loop did not get to them: end their streams anyway
            state = self._states.get(request_id)
            if state is not None:
                self._finish(state, "cancelled", None)
        close = getattr(self.executor, "close", None)
        if close is not None:
            close()

    # -- requests ------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)):
            bad = next((i for i, t in enumerate(prompt) if not isinstance(t, int) or isinstance(t, bool)), None)
            if bad is not None:
                raise RequestError(f"prompt[{bad}] must be an integer token id, got {prompt[bad]!r}", "prompt")
            bad = next((i for i, t in enumerate(prompt) if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise RequestError(
                    f"prompt[{bad}] = {prompt[bad]} is not a token id of this model (vocabulary 0..{self.vocab_size - 1})",
                    "prompt",
                )
            ids = list(prompt)
        else:
            raise RequestError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}", "prompt")
        if not ids:
            raise RequestError("prompt must not be empty", "prompt")
        if len(ids) >= self.ctx:
            raise RequestError(
                f"prompt has {len(ids)} tokens but the context holds {self.ctx} (prompt plus at least one generated token)",
                "prompt",
            )
        return ids

    def submit(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        on_output: Callable[[TokenOutput | Finished], None] | None = None,
    ) -> RequestHandle:
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise RequestError("params must be a SamplingParams", "params")
        ids = self.encode_prompt(prompt)
        request_id = request_id or uuid.uuid4().hex[:16]
        with self._lock:
            if request_id in self._states:
                raise RequestError(f"request id {request_id!r} is already in use", "request_id")
        handle = RequestHandle(request_id, self.cancel, prompt_tokens=len(ids))

        def deliver(item: TokenOutput | Finished) -> None:
            handle._push(item)
            if on_output is not None:
                on_output(item)

        seed = params.seed if params.seed is not None else next(self._seeds)
        state = RequestState(
            request_id=request_id,
            prompt_ids=ids,
            params=params,
            decoder=self.tokenizer.decode_stream(),
            token_text=lambda tid: self.tokenizer.decode([tid]),
            deliver=deliver,
            clock=self.clock,
            seed=seed,
        )
        request = Request(
            request_id,
            ids,
            params.max_tokens,
            arrival=self.clock(),
            payload=state,
            sampler=self._make_sampler(params, seed),
            logprobs=params.logprobs,
            cache_salt=params.cache_salt,
            params=params,
            seed=seed,
        )
        state.handle = handle
        with self._lock:
            self._states[request_id] = state
            self._handles[request_id] = handle
        self.scheduler.add(request)
        self._wake.set()
        return handle

    def _make_sampler(self, params: SamplingParams, seed: int) -> TokenSampler | None:
        if self.config.executor == "sim":
            return None
        from .runtime.sampler import Sampler

        return Sampler(params, seed)

    def cancel(self, request_id: str) -> None:
        self.scheduler.cancel(request_id)
        self._wake.set()

    # -- the scheduler's sink ------------------------------------------------------------------
    def on_token(self, request: Request, token: SampledToken) -> str | None:
        state: RequestState = request.payload
        if state.handle is not None and not state.token_ids:  # admitted: what the prompt cache gave is known
            state.handle.cached_tokens = request.cached_tokens
        reason = finish_reason(
            token.token_id,
            tokens_generated=request.tokens_generated,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            ctx=self.ctx,
            eos_token_id=self.eos_token_id,
            ignore_eos=state.params.ignore_eos,
        )
        if reason == "stop":  # EOS ends the request and is not part of its output
            return reason
        return state.accept(token, reason)

    def on_finish(self, request: Request) -> None:
        state: RequestState = request.payload
        self._finish(state, request.finish_reason or "stop", request.error, request.cached_tokens)

    def _finish(self, state: RequestState, reason: str, error: str | None, cached_tokens: int = 0) -> None:
        with self._lock:
            if state.finished:
                return
            state.finished = True
            self._states.pop(state.request_id, None)
            self._handles.pop(state.request_id, None)
        unsent = state.text[state.emitted_chars :]
        state.deliver(Finished(state.completion(reason, error, cached_tokens), unsent))

    # -- conveniences --------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[str | Sequence[int]] | str, params: SamplingParams | None = None
    ) -> list[Completion]:
        """Submit all prompts at once (they batch), wait for every completion, in order."""
        if isinstance(prompts, str):
            prompts = [prompts]
        self.start()
        handles = [self.submit(p, params) for p in prompts]
        return [h.result() for h in handles]

    def stream(self, prompt: str | Sequence[int], params: SamplingParams | None = None) -> Iterator[TokenOutput]:
        self.start()
        handle = self.submit(prompt, params)
        try:
            yield from handle
        finally:
            if not handle._done.is_set():
                handle.cancel()

    def info(self) -> dict[str, Any]:
        """What `/v1/engine` serves: the engine's shape, knobs, kernels and memory (engine_info.py)."""
        return describe(self)

    def stats(self) -> dict[str, Any]:
        """The scheduler's counts and the KV cache's shape (`/metrics` reads them at each scrape)."""
        stats = self.scheduler.stats() if hasattr(self.scheduler, "stats") else {}
        return {**stats, "kv": kv_info(self)}
