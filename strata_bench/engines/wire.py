"""Reading one streamed event into a StreamResult, in the two wire forms servers speak.

OpenAI form: `choices[]` with `text` (or chat `delta.content`), `token_ids` (Strata, vLLM), legacy
`logprobs` (`tokens`, `token_logprobs`, `top_logprobs`) or chat `logprobs.content`; `usage`; an
`error` object. A choice counts `len(token_ids)` tokens, else the number of logprob tokens, else 1
for non-empty text: k tokens in one event share one arrival stamp, so packing never fakes small gaps.
llama.cpp form (`/completion`): `content`, `tokens` (with `return_tokens`), `completion_probabilities`
(with `n_probs`), and on the last event `stop: true` with `stop_type` and the prompt/answer counts.
"""

from __future__ import annotations

import json
from typing import Any

from .families import LLAMA_CPP_WIRE
from .result import StreamResult

# llama.cpp's stop types as OpenAI finish reasons; "none" (stopped for no reason it names) is no finish.
_LLAMA_STOP = {"limit": "length", "eos": "stop", "word": "stop"}


def error_message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message") or payload["error"])
    if isinstance(payload, dict) and payload.get("error") is not None:
        return str(payload["error"])
    return str(payload)[:300]


def error_body_detail(raw: bytes) -> str:
    """An error response's message: its JSON error's text, else the body's first 300 characters."""
    try:
        return error_message(json.loads(raw))
    except ValueError:
        return raw.decode("utf-8", errors="replace")[:300]


def choice_tokens(choice: dict[str, Any]) -> tuple[int, list[int] | None, str]:
    """(token count, token ids or None, text) of one streamed OpenAI choice (completion or chat chunk)."""
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


def apply_event(result: StreamResult, data: str, arrived: float, wire: str) -> Any:
    """Record one SSE `data` payload; returns the parsed payload (None when it was not JSON)."""
    result.events += 1
    try:
        payload = json.loads(data)
    except ValueError:
        result.warnings.append(f"unparseable event: {data[:120]!r}")
        return None
    if not isinstance(payload, dict):
        return payload
    if "error" in payload:
        result.error = f"error event: {error_message(payload)}"
        return payload
    if wire == LLAMA_CPP_WIRE:
        _llama_event(result, payload, arrived)
    else:
        _openai_event(result, payload, arrived)
    return payload


def _openai_event(result: StreamResult, payload: dict[str, Any], arrived: float) -> None:
    if payload.get("usage"):
        result.usage = payload["usage"]
    if result.engine_id is None and isinstance(payload.get("id"), str):
        result.engine_id = payload["id"]
    for choice in payload.get("choices") or []:
        count, ids, text = choice_tokens(choice)
        lp = choice.get("logprobs")
        logprobs = tops = texts = None
        if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
            logprobs, tops, texts = lp["token_logprobs"], lp.get("top_logprobs") or [], lp.get("tokens")
        result.add_tokens(count, arrived, ids, logprobs, tops, texts)
        result.text += text
        if choice.get("prompt_token_ids") is not None:
            result.prompt_token_ids = [int(i) for i in choice["prompt_token_ids"]]
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


def _llama_event(result: StreamResult, payload: dict[str, Any], arrived: float) -> None:
    text = payload.get("content") or ""
    ids = payload.get("tokens")
    probs = payload.get("completion_probabilities")
    logprobs = tops = None
    if isinstance(probs, list) and probs:
        logprobs = [p.get("logprob") for p in probs]
        tops = [{str(c.get("id")): c.get("logprob") for c in p.get("top_logprobs") or []} or None for p in probs]
    if isinstance(ids, list):
        count = len(ids)
        ids = [int(i) for i in ids]
    else:
        count, ids = (len(probs) if isinstance(probs, list) and probs else (1 if text else 0)), None
    texts = [str(i) for i in ids] if ids is not None and tops is not None else None  # tops are keyed by id here
    result.add_tokens(count, arrived, ids, logprobs, tops, texts)
    result.text += text
    if payload.get("stop"):
        result.finish_reason = _LLAMA_STOP.get(str(payload.get("stop_type")))
        prompt, answer = payload.get("tokens_evaluated"), payload.get("tokens_predicted")
        if isinstance(prompt, int) and isinstance(answer, int):
            result.usage = {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}
