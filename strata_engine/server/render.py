"""OpenAI response objects for one request: completions (`text_completion`) and chat
(`chat.completion` / `chat.completion.chunk`), streamed one event per token or whole.

Pure functions of the engine's TokenOutput / Completion values; no I/O, no engine calls, so the
wire format is tested without a server. The completion id is `cmpl-<request_id>` (docs/API.md).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Sequence


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class Render:
    """Builds the JSON of one request's response. `kind` is "completion" or "chat"."""

    def __init__(
        self,
        *,
        kind: str,
        request_id: str,
        model: str,
        prompt_ids: Sequence[int],
        token_str: Callable[[int], str],
        return_token_ids: bool = False,
        logprobs: bool = False,
    ):
        if kind not in ("completion", "chat"):
            raise ValueError(f"kind must be 'completion' or 'chat', got {kind!r}")
        self.kind = kind
        self.chat = kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + request_id
        self.model = model
        self.created = int(time.time())
        self.prompt_ids = list(prompt_ids)
        self.token_str = token_str
        self.return_token_ids = return_token_ids
        self.logprobs = logprobs
        self._text_offset = 0  # legacy logprobs: characters of completion text before this token
        self._sent_role = False
        self._hot_prefix: str | None = None  # the constant start of every token event's JSON

    # ---- pieces ---------------------------------------------------------------------------------
    def usage(self, completion_tokens: int, prompt_tokens: int | None = None, cached_tokens: int = 0) -> dict[str, Any]:
        """OpenAI's usage; `prompt_tokens_details.cached_tokens`: prompt tokens the prompt cache gave."""
        prompt = len(self.prompt_ids) if prompt_tokens is None else prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }

    def _legacy_logprobs(self, tokens: Sequence[Any]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for tok in tokens:
            chosen = self.token_str(tok.token_id)
            out["tokens"].append(chosen)
            out["token_logprobs"].append(tok.logprob)
            top = {text: lp for _id, text, lp in (tok.top_logprobs or ())}
            if tok.logprob is not None:
                top.setdefault(chosen, tok.logprob)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self._text_offset)
            self._text_offset += len(tok.text)
        return out

    def _chat_logprobs(self, tokens: Sequence[Any]) -> dict[str, list[Any]]:
        def entry(token: str, logprob: float | None) -> dict[str, Any]:
            return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

        content = []
        for tok in tokens:
            item = entry(self.token_str(tok.token_id), tok.logprob)
            item["top_logprobs"] = [entry(text, lp) for _id, text, lp in (tok.top_logprobs or ())]
            content.append(item)
        return {"content": content}

    def _logprobs(self, tokens: Sequence[Any]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        return self._chat_logprobs(tokens) if self.chat else self._legacy_logprobs(tokens)

    # ---- streaming ------------------------------------------------------------------------------
    def chunk(
        self,
        tokens: Sequence[Any],
        finish_reason: str | None,
        usage: dict[str, int] | None = None,
        tail_text: str = "",
        prompt_ids: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """One SSE event: the given tokens (one, or none for a bare finish) and maybe the finish reason.
        `tail_text` is text the engine held back (a possible stop-string prefix) and released at the end."""
        text = "".join(t.text for t in tokens) + tail_text
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if not self._sent_role:
                delta = {"role": "assistant", **delta}
                self._sent_role = True
            choice["delta"] = delta
        else:
            choice["text"] = text
        choice["logprobs"] = self._logprobs(tokens)
        choice["finish_reason"] = finish_reason
        if self.return_token_ids:
            choice["token_ids"] = [t.token_id for t in tokens]
            if prompt_ids is not None:
                choice["prompt_token_ids"] = list(prompt_ids)
        obj = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])
        if usage is not None:
            obj["usage"] = usage
        return obj

    def token_event(self, tok: Any) -> bytes:
        """The SSE bytes of `chunk([tok], None)`, built without a dict: the per-token hot path when the
        request has no logprobs. Same JSON, byte for byte (tests compare the two)."""
        if self.logprobs or (self.chat and not self._sent_role):
            return b"data: " + dumps(self.chunk([tok], None)).encode() + b"\n\n"
        if self._hot_prefix is None:
            head = dumps(self._envelope("chat.completion.chunk" if self.chat else "text_completion", []))
            assert head.endswith('"choices":[]}')
            self._hot_prefix = head[:-3] + ('[{"index":0,"delta":{"content":' if self.chat else '[{"index":0,"text":')
        ids = f',"token_ids":[{tok.token_id}]' if self.return_token_ids else ""
        close = "}" if self.chat else ""
        text = json.dumps(tok.text, ensure_ascii=False)
        return f'data: {self._hot_prefix}{text}{close},"logprobs":null,"finish_reason":null{ids}}}]}}\n\n'.encode()

    def usage_chunk(
        self, completion_tokens: int, prompt_tokens: int | None = None, cached_tokens: int = 0
    ) -> dict[str, Any]:
        obj = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        obj["usage"] = self.usage(completion_tokens, prompt_tokens, cached_tokens)
        return obj

    # ---- whole response -------------------------------------------------------------------------
    def response(self, completion: Any) -> dict[str, Any]:
        """The non-streaming object for a finished Completion."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": completion.text}
        else:
            choice["text"] = completion.text
        choice["logprobs"] = self._logprobs(completion.logprobs or [])
        choice["finish_reason"] = completion.finish_reason
        if self.return_token_ids:
            choice["token_ids"] = list(completion.token_ids)
            choice["prompt_token_ids"] = list(completion.prompt_token_ids)
        obj = self._envelope("chat.completion" if self.chat else "text_completion", [choice])
        obj["usage"] = self.usage(
            len(completion.token_ids), len(completion.prompt_token_ids), getattr(completion, "cached_tokens", 0)
        )
        return obj

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
