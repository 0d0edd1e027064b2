"""Server families: what each kind of server takes and gives, and the request body that means greedy there.

A `Family` is data: the completion endpoint and its wire form (OpenAI SSE `choices`, or llama.cpp's
native `/completion` events), whether prompts may be token ids, how token ids come back, the sampling
fields that make temperature 0 truly greedy (neutral penalties, no top-k/top-p/min-p cut), the request-id
header it accepts, its tokenize endpoint, and how to keep a request off its prefix cache. `probe.py`
decides which family a server is; `stream.py` sends `request_body(...)` and parses with `wire`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

OPENAI_WIRE = "openai"  # SSE events with `choices`, ending in [DONE]
LLAMA_CPP_WIRE = "llama.cpp"  # /completion events with `content`, `tokens`, `stop`; the stream just ends

# Stable namespace: the same readable id always maps to the same UUID, so logs can be matched.
_ID_NAMESPACE = uuid.UUID("5f0c3c4e-2b8f-4f57-9d0a-7a1b5e0c1f11")


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    endpoint: str = "/v1/completions"
    wire: str = OPENAI_WIRE
    ids_in: bool = False  # the prompt may be a list of token ids
    ids_out: str | None = None  # the body flag that returns generated token ids, None when there is none
    request_ids: str = "uuid"  # "readable" (any 1-128 of [A-Za-z0-9._:-]), "uuid", or "none"
    greedy: dict[str, Any] = field(default_factory=dict)  # fields beyond temperature 0 that make it greedy
    extras: dict[str, Any] = field(default_factory=dict)  # other fields the family understands
    tokenize: str | None = None  # POST path that counts a text's tokens
    cold: dict[str, Any] = field(default_factory=dict)  # body fields that keep a request off the prefix cache
    cold_salt: str | None = None  # a body field whose fresh random value per request does the same (vLLM)
    warm: dict[str, Any] = field(default_factory=dict)  # body fields that let its prefix cache serve a request
    events: bool = False  # Strata's GET /v1/events

    def headers(self, readable_id: str) -> dict[str, str]:
        """The request-id header in a form this family accepts (llama-cpp-python rejects non-UUIDs)."""
        if self.request_ids == "readable":
            return {"X-Request-Id": readable_id}
        if self.request_ids == "uuid":
            return {"X-Request-Id": wire_request_id(readable_id)}
        return {}

    def request_id(self, readable_id: str) -> str | None:
        """The id the server will know the request by (None when it takes none)."""
        return self.headers(readable_id).get("X-Request-Id")

    def request_body(
        self,
        prompt: list[int] | str,
        max_tokens: int,
        *,
        model: str | None = None,
        logprobs: int | None = None,
        cold: bool = False,
        warm: bool = False,
    ) -> dict[str, Any]:
        """A streaming greedy completion body in this family's words; `cold` keeps it off the server's prefix
        cache, `warm` asks for the cache where the family needs asking (agent sessions)."""
        if isinstance(prompt, list) and not self.ids_in:
            raise ValueError(f"{self.label} takes text prompts, not token ids")
        if self.wire == LLAMA_CPP_WIRE:
            body: dict[str, Any] = {
                "prompt": prompt,
                "n_predict": max_tokens,
                "temperature": 0,
                "stream": True,
                **self.greedy,
                **self.extras,
            }
            if logprobs:
                body["n_probs"] = logprobs
        else:
            body = {
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                **self.greedy,
                **self.extras,
            }
            if logprobs:
                body["logprobs"] = logprobs
            if model:
                body["model"] = model
        if self.ids_out:
            body[self.ids_out] = True
        if warm:
            body.update(self.warm)
        if cold:
            body.update(self.cold)
            if self.cold_salt:
                body[self.cold_salt] = uuid.uuid4().hex
        return body

    @property
    def cold_description(self) -> str | None:
        """How a request keeps off the prefix cache here, for reports; None when there is no switch."""
        parts = [f"{k}={v!r}" for k, v in self.cold.items()]
        if self.cold_salt:
            parts.append(f"a fresh random {self.cold_salt} per request")
        return ", ".join(parts) or None


def wire_request_id(readable_id: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, readable_id))


_NEUTRAL_OPENAI = {"presence_penalty": 0, "frequency_penalty": 0, "top_p": 1}
# llama.cpp's samplers: repeat penalty 1 (llama-cpp-python defaults to 1.1), no top-k/min-p/typical cut,
# DRY and XTC off. With these, temperature 0 is the argmax of the model's logits.
_NEUTRAL_LLAMA = {
    **_NEUTRAL_OPENAI,
    "repeat_penalty": 1.0,
    "top_k": 0,
    "min_p": 0,
    "typical_p": 1,
    "dry_multiplier": 0,
    "xtc_probability": 0,
}

# Strata: its prompt cache takes vLLM's `cache_salt`, so the gate's solo runs are cold reads, not cache hits.
STRATA = Family(
    "strata",
    "Strata",
    ids_in=True,
    ids_out="return_token_ids",
    request_ids="readable",
    greedy=dict(_NEUTRAL_OPENAI),
    extras={"ignore_eos": True},
    events=True,
    cold_salt="cache_salt",
)
LLAMA_CPP = Family(
    "llama.cpp",
    "llama.cpp llama-server",
    endpoint="/completion",
    wire=LLAMA_CPP_WIRE,
    ids_in=True,
    ids_out="return_tokens",
    request_ids="none",
    greedy=dict(_NEUTRAL_LLAMA),
    extras={"ignore_eos": True},
    tokenize="/tokenize",
    cold={"cache_prompt": False},
    warm={"cache_prompt": True},
)
# Its completion `prompt` is a string or a list of strings (no token ids); its tokenizer is /extras/tokenize.
LLAMA_CPP_PYTHON = Family(
    "llama-cpp-python",
    "llama-cpp-python server",
    ids_in=False,
    request_ids="uuid",
    greedy={**_NEUTRAL_OPENAI, "repeat_penalty": 1.0, "top_k": 0, "min_p": 0},
    tokenize="/extras/tokenize",
)
# vLLM: prefix-cache hits in usage.prompt_tokens_details.cached_tokens when served with
# --enable-prompt-tokens-details; `cache_salt` (a fresh one per request) keeps a request off cached blocks.
VLLM = Family(
    "vllm",
    "vLLM",
    ids_in=True,
    ids_out="return_token_ids",
    greedy={**_NEUTRAL_OPENAI, "top_k": -1, "min_p": 0, "repetition_penalty": 1.0},
    extras={"ignore_eos": True},
    tokenize="/tokenize",
    cold_salt="cache_salt",
)
SGLANG = Family(
    "sglang",
    "SGLang",
    ids_in=True,
    greedy={**_NEUTRAL_OPENAI, "top_k": -1, "min_p": 0, "repetition_penalty": 1.0},
    extras={"ignore_eos": True},
)
OPENAI = Family("openai", "OpenAI-compatible server", greedy=dict(_NEUTRAL_OPENAI))

FAMILIES = {f.name: f for f in (STRATA, LLAMA_CPP, LLAMA_CPP_PYTHON, VLLM, SGLANG, OPENAI)}


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown server family {name!r}; known: {', '.join(FAMILIES)}") from None
