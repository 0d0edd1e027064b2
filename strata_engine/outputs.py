"""What a request gives back: per-token outputs, the final completion, and the handle a caller holds.

`RequestState` is the engine's per-request postprocessing (incremental text, stop strings, delivery);
it lives in `Request.payload`, which only the engine reads (executors sample with `Request.sampler`). Whether a token ends its
request (EOS, max tokens, the context's end) the engine decides (`finish.finish_reason`) and tells it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .tokens import SampledToken
from .params import SamplingParams


@dataclass(frozen=True)
class TokenOutput:
    index: int  # position in the output, 0-based
    token_id: int
    text: str  # delta text; never half a UTF-8 character
    logprob: float | None = None
    top_logprobs: list[tuple[int, str, float]] | None = None
    t: float = 0.0  # engine clock (monotonic seconds) when the token was sampled
    finish_reason: str | None = None  # set on the request's last token: "stop" or "length"


@dataclass(frozen=True)
class Completion:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[TokenOutput] | None
    finish_reason: str  # "stop" | "length" | "cancelled" | "error"
    error: str | None = None
    cached_tokens: int = 0  # prompt tokens the prompt cache gave (usage.prompt_tokens_details.cached_tokens)


@dataclass(frozen=True)
class Finished:
    """The last item of a stream. `unsent_text` is text held back (a possible stop-string prefix) that no
    TokenOutput carried; a streaming server sends it with the final event."""

    completion: Completion
    unsent_text: str = ""


_END = object()


class RequestHandle:
    """Held by the caller: iterate for tokens (blocking), `result()` for the completion, `cancel()` to stop."""

    def __init__(self, request_id: str, cancel: Callable[[str], None], prompt_tokens: int = 0):
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens  # the prompt's length in tokens, as the engine tokenized it
        self.cached_tokens = 0  # prompt tokens the prompt cache gave, set when the request takes its slot
        self._cancel = cancel
        self._items: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._completion: Completion | None = None

    def _push(self, item: TokenOutput | Finished) -> None:
        if isinstance(item, Finished):
            self._completion = item.completion
            self._done.set()
            self._items.put(_END)
        else:
            self._items.put(item)

    def cancel(self) -> None:
        self._cancel(self.request_id)

    def result(self, timeout: float | None = None) -> Completion:
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish within {timeout} s")
        assert self._completion is not None
        return self._completion

    def __iter__(self) -> Iterator[TokenOutput]:
        while True:
            item = self._items.get()
            if item is _END:
                return
            yield item


@dataclass(eq=False)
class RequestState:
    """Engine-side state of one request: sampling params, text assembly, stop detection, delivery."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    decoder: Any  # tokenizer.decode_stream()-like object: .add(token_id) -> str delta
    token_text: Callable[[int], str]
    deliver: Callable[[TokenOutput | Finished], None]
    clock: Callable[[], float]
    seed: int = 0
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted_chars: int = 0
    outputs: list[TokenOutput] = field(default_factory=list)
    finished: bool = False
    handle: Any = None  # the caller's RequestHandle (its cached_tokens is set once the request has a slot)

    def accept(self, token: SampledToken, reason: str | None) -> str | None:
        """Take one output token and the engine's finish decision for it (None, or "length"); deliver what
        is safe to show, the reason on it; return the reason, "stop" when a stop string ended the text."""
        p = self.params
        self.token_ids.append(token.token_id)
        self.text += self.decoder.add(token.token_id)
        stop_at = self._stop_index()
        if stop_at is not None:
            self.text = self.text[:stop_at]
            reason = "stop"
        # hold back a tail that could still become a stop string
        hold = 0 if reason else max((len(s) - 1 for s in p.stop), default=0)
        upto = max(self.emitted_chars, len(self.text) - hold)
        delta = self.text[self.emitted_chars : upto]
        self.emitted_chars = upto
        top = None
        if token.top:
            top = [(tid, self.token_text(tid), lp) for tid, lp in token.top]
        out = TokenOutput(len(self.token_ids) - 1, token.token_id, delta, token.logprob, top, self.clock(), reason)
        if p.logprobs is not None:
            self.outputs.append(out)
        self.deliver(out)
        return reason

    def _stop_index(self) -> int | None:
        if not self.params.stop:
            return None
        # search only the region the newest token could have completed
        window = max(len(s) for s in self.params.stop) + 8
        start = max(0, len(self.text) - window - 8)
        hits = [i for s in self.params.stop if (i := self.text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def completion(self, finish_reason: str, error: str | None = None, cached_tokens: int = 0) -> Completion:
        return Completion(
            request_id=self.request_id,
            prompt_token_ids=list(self.prompt_ids),
            token_ids=list(self.token_ids),
            text=self.text,
            logprobs=list(self.outputs) if self.params.logprobs is not None else None,
            finish_reason=finish_reason,
            error=error,
            cached_tokens=cached_tokens,
        )
