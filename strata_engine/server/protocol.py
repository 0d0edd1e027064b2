"""Request bodies of the OpenAI-compatible endpoints (pydantic, strict, unknown fields rejected).

Types are checked here (a string where a number belongs is a 400 naming the field); value ranges are
checked by `SamplingParams` and `Engine.submit`, which raise `RequestError(message, field)`. OpenAI
fields this engine cannot honour (n > 1, echo, penalties, logit_bias) are accepted only at their
neutral value, so a client that sends the defaults works and one that relies on them hears why not.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import RequestError
from ..params import SamplingParams


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None  # usage event at the end; on unless explicitly false (docs/API.md)
    continuous_usage_stats: bool = False  # vLLM extension: usage on every chunk


class _Sampling(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    return_token_ids: bool = False
    # OpenAI fields accepted only at their neutral value (checked in `unsupported`).
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    cache_salt: str | None = None  # vLLM's: prompt-cache prefixes are shared only between requests with one salt

    def unsupported(self) -> None:
        if self.n != 1:
            raise RequestError(f"n must be 1 (one choice per request), got {self.n}", "n")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0:
                raise RequestError(f"{name} is not supported; send 0 or leave it out", name)
        if self.logit_bias:
            raise RequestError("logit_bias is not supported; leave it out", "logit_bias")

    @property
    def include_usage(self) -> bool:
        return self.stream_options is None or self.stream_options.include_usage is not False

    @property
    def continuous_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.continuous_usage_stats

    def sampling_params(self, max_tokens: int, logprobs: int | None) -> SamplingParams:
        """The engine's parameters; raises RequestError naming the field for out-of-range values."""
        self.unsupported()
        if self.stop is None:
            stop: tuple[str, ...] = ()
        elif isinstance(self.stop, str):
            stop = (self.stop,)
        else:
            stop = tuple(self.stop)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=0 if self.top_k is None or self.top_k == -1 else self.top_k,  # -1 = off (vLLM)
            seed=self.seed,
            stop=stop,
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
            cache_salt=self.cache_salt,
        )


def check_max_tokens(value: Any, ctx: int, field: str = "max_tokens") -> None:
    if value is not None and (value < 1 or value > ctx):
        raise RequestError(f"{field} must be between 1 and the context length {ctx}, got {value}", field)


class CompletionRequest(_Sampling):
    prompt: Any  # str or list of token ids; see _prompt
    max_tokens: int | None = 16  # OpenAI's default for legacy completions
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, value: Any) -> str | list[int]:
        # A batch of exactly one prompt (["text"] or [[ids]]) is the same request; larger batches are not.
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
            value = value[0]
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            return value
        if isinstance(value, list) and any(isinstance(t, (str, list)) for t in value):
            raise ValueError("batched prompts are not supported; send one request per prompt")
        raise ValueError("prompt must be a string or a list of integer token ids")

    def unsupported(self) -> None:
        super().unsupported()
        if self.echo:
            raise RequestError("echo is not supported; leave it out", "echo")
        if self.best_of not in (None, 1):
            raise RequestError(f"best_of must be 1, got {self.best_of}", "best_of")
        if self.suffix:
            raise RequestError("suffix is not supported; leave it out", "suffix")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None  # None = until the context is full (or EOS)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    def logprobs_k(self) -> int | None:
        if self.top_logprobs is not None and not self.logprobs:
            raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
        if not self.logprobs:
            return None
        return self.top_logprobs or 0

    def prompt_text(self) -> str:
        """The byte-level model's chat template: one `role: content` line per message, then `assistant: `."""
        return "".join(f"{m.role}: {m.text}\n" for m in self.messages) + "assistant: "
