"""A load run's requests: input and output lengths (fixed or drawn, seeded) and the request bodies.

Request i's lengths and prompt are a function of (seed, i) alone, so two arms, two rounds of one arm, or
a rerun send the same requests. Prompts are token ids when the server takes them (completions only),
otherwise seeded words (about one token each, so text lengths are approximate; the report says which).
Lengths: `256` (fixed), `uniform:LOW:HIGH` (inclusive), `normal:MEAN:STD` (rounded, at least 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..prompts import prompt_digest, prompt_seed, text_prompt, token_prompt

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class LengthSpec:
    """A token-length distribution: fixed, uniform (inclusive) or normal (rounded, floored at 1)."""

    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "normal"):
            raise ValueError(f"length kind must be fixed, uniform or normal, got {self.kind!r}")
        if self.kind == "fixed" and (self.a < 1 or self.a != int(self.a)):
            raise ValueError(f"a fixed length must be a whole number >= 1, got {self.a:g}")
        if self.kind == "uniform" and not 1 <= self.a <= self.b:
            raise ValueError(f"uniform:LOW:HIGH needs 1 <= LOW <= HIGH, got {self.a:g}:{self.b:g}")
        if self.kind == "normal" and (self.a < 1 or self.b < 0):
            raise ValueError(f"normal:MEAN:STD needs MEAN >= 1 and STD >= 0, got {self.a:g}:{self.b:g}")

    @classmethod
    def parse(cls, text: str, what: str = "length") -> "LengthSpec":
        parts = text.strip().split(":")
        try:
            if len(parts) == 1:
                return cls("fixed", float(int(parts[0])))
            if len(parts) == 3 and parts[0] in ("uniform", "normal"):
                return cls(parts[0], float(parts[1]), float(parts[2]))
        except ValueError as exc:
            raise ValueError(f"{what} {text!r}: {exc}") from None
        raise ValueError(f"{what} {text!r}: expected N, uniform:LOW:HIGH or normal:MEAN:STD")

    def draw(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(rng.integers(int(self.a), int(self.b) + 1))
        return max(1, int(round(rng.normal(self.a, self.b))))

    def __str__(self) -> str:
        return f"{self.a:g}" if self.kind == "fixed" else f"{self.kind}:{self.a:g}:{self.b:g}"


@dataclass(frozen=True)
class ServerTraits:
    """What the bodies depend on: the model name, token-id input, vocabulary and EOS (server_info.ServerInfo)."""

    model: str | None
    token_ids: bool
    vocab_size: int | None = None
    eos_token_id: int | None = None


@dataclass(frozen=True)
class PreparedRequest:
    index: int
    path: str
    body: bytes
    input_tokens: int  # as drawn; text prompts are approximate
    max_tokens: int
    prompt_sha256: str


@dataclass(frozen=True)
class Workload:
    input_len: LengthSpec
    output_len: LengthSpec
    endpoint: str = "completions"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")

    def prompt_mode(self, server: ServerTraits) -> str:
        return "ids" if self.endpoint == "completions" and server.token_ids and server.vocab_size else "text"

    def request(self, index: int, server: ServerTraits) -> PreparedRequest:
        """Request `index`'s body, encoded now so its JSON costs nothing after the send time is taken."""
        rng = np.random.default_rng(prompt_seed("load", self.seed, index))
        input_tokens, max_tokens = self.input_len.draw(rng), self.output_len.draw(rng)
        seed = prompt_seed("load-prompt", self.seed, index)
        prompt: list[int] | str
        if self.prompt_mode(server) == "ids":
            assert server.vocab_size is not None
            prompt = token_prompt(seed, input_tokens, server.vocab_size, server.eos_token_id)
        else:
            prompt = text_prompt(seed, input_tokens)
        body: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if server.model:
            body["model"] = server.model
        if server.token_ids:
            body["return_token_ids"] = True
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return PreparedRequest(
            index=index,
            path=ENDPOINTS[self.endpoint],
            body=json.dumps(body).encode(),
            input_tokens=input_tokens,
            max_tokens=max_tokens,
            prompt_sha256=prompt_digest(prompt),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_len": str(self.input_len),
            "output_len": str(self.output_len),
            "endpoint": self.endpoint,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Workload":
        return cls(
            LengthSpec.parse(data["input_len"], "input length"),
            LengthSpec.parse(data["output_len"], "output length"),
            data.get("endpoint", "completions"),
            int(data.get("seed", 0)),
        )
