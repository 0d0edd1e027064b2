"""A synthetic OpenAI-compatible streaming server with known timing, for the bench's tests and benchmark.

Streams emit a token every `--itl-ms` (k tokens per SSE event with `--pack k`); prompts are read one at a
time, `--read-ms-per-token` each. `--mode release` stops every stream for a whole read, `--mode pieces`
stops them per `--piece-tokens` then lets them decode `--piece-decode-ms`, `--mode free` never stops them.
Tokens are a function of the prompt (greedy-like: the same prompt, the same tokens). It can fail requests,
stall, die mid-run or never get healthy, so every bad path of the bench is testable without an engine.
Each event carries `synthetic_t` (its perf_counter send time) for measuring the client's own error.
Run: python -m strata_bench.synthetic --port 8000 [flags] (--prompt-cache-tokens N: a prefix cache); see --help;
from Python, launcher.spawn starts it on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from .cache import PrefixCache


@dataclass(frozen=True)
class SyntheticConfig:
    itl_ms: float = 20.0
    pack: int = 1
    read_ms_per_token: float = 0.05
    mode: str = "release"
    piece_tokens: int = 1024
    piece_decode_ms: float = 50.0
    vocab_size: int = 1000
    ctx: int = 1_000_000
    batch: int = 64
    token_ids: bool = True  # False: a plain OpenAI server (no /v1/engine, text prompts, no ids)
    fail_match: str = ""  # requests whose X-Request-Id contains this fail
    fail_after_tokens: int = 0  # 0: HTTP 500 before streaming; k: an error event after k tokens
    stall_after_tokens: int = 0  # every request pauses once after this many tokens...
    stall_s: float = 0.0  # ...for this long
    perturb_match: str = ""  # requests whose X-Request-Id contains this get other tokens...
    perturb_from: int = 0  # ...from this token index on
    die_after_s: float = 0.0  # exit(3) this long after the first completion request
    health_delay_s: float = 0.0  # /health answers 503 this long after start
    hold_while: str = ""  # a path: /health answers 503 while it exists (a test holds a run at a known point)
    owned_by: str = "strata"  # GET /v1/models' owned_by ("me" plays llama-cpp-python, "vllm" vLLM)
    uuid_request_ids: bool = False  # a non-UUID X-Request-Id gets HTTP 400 with an empty message
    end_early_after: int = 0  # k > 0: the stream ends with [DONE] after k tokens, no finish_reason
    prompt_cache_tokens: int = 0  # > 0: a prefix cache of this many tokens (0: every read cold, no cached_tokens)

    def __post_init__(self) -> None:
        if self.mode not in ("release", "pieces", "free"):
            raise ValueError(f"mode must be release, pieces or free, got {self.mode!r}")
        if self.itl_ms <= 0 or self.pack < 1 or self.piece_tokens < 1 or self.vocab_size < 2:
            raise ValueError("itl_ms > 0, pack >= 1, piece_tokens >= 1, vocab_size >= 2 are required")


class SyntheticEngine:
    """The timing model: one reader at a time; a gate that stops all decoding while a read holds it."""

    def __init__(self, config: SyntheticConfig):
        self.config = config
        self.started = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self._read_lock = asyncio.Lock()
        self._decode_open = asyncio.Event()
        self._decode_open.set()
        self._dying = False
        self.cache = PrefixCache(config.prompt_cache_tokens)

    def event(self, kind: str, request_id: str, **fields: Any) -> None:
        self.events.append(
            {
                "index": len(self.events),
                "kind": kind,
                "t": time.monotonic(),
                "slot": None,
                "request_id": request_id,
                **fields,
            }
        )

    async def read(self, request_id: str, prompt_tokens: int) -> None:
        cfg = self.config
        async with self._read_lock:
            if cfg.mode == "free":
                await asyncio.sleep(prompt_tokens * cfg.read_ms_per_token / 1000)
                return
            piece = prompt_tokens if cfg.mode == "release" else cfg.piece_tokens
            done = 0
            while done < prompt_tokens:
                tokens = min(piece, prompt_tokens - done)
                self._decode_open.clear()
                try:
                    await asyncio.sleep(tokens * cfg.read_ms_per_token / 1000)
                finally:
                    self._decode_open.set()
                done += tokens
                if cfg.mode == "pieces":
                    self.event(
                        "PIECE",
                        request_id,
                        tokens=tokens,
                        tokens_read=done,
                        read_ms=tokens * cfg.read_ms_per_token,
                        decode_ms=cfg.piece_decode_ms,
                        decode_steps=0,
                    )
                    if done < prompt_tokens:
                        await asyncio.sleep(cfg.piece_decode_ms / 1000)
            self.event("READ_DONE", request_id, tokens=prompt_tokens, read_ms=prompt_tokens * cfg.read_ms_per_token)

    def token_id(self, digest: bytes, index: int, perturbed: bool) -> int:
        salt = b"p" if perturbed and index >= self.config.perturb_from else b""
        h = hashlib.blake2b(digest + salt + index.to_bytes(8, "little"), digest_size=8).digest()
        return int.from_bytes(h, "little") % self.config.vocab_size

    async def stream(self, request_id: str, prompt: Any, max_tokens: int, want_ids: bool) -> AsyncIterator[bytes]:
        cfg = self.config
        self._maybe_die()
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
        digest = hashlib.sha256(json.dumps(prompt).encode()).digest()
        perturbed = bool(cfg.perturb_match) and cfg.perturb_match in request_id
        failing = bool(cfg.fail_match) and cfg.fail_match in request_id
        hit = self.cache.lookup(prompt)
        await self.read(request_id, prompt_tokens - hit.cached_tokens)
        sent, next_at = 0, time.perf_counter()
        while sent < max_tokens:
            if cfg.end_early_after and sent >= cfg.end_early_after:
                yield b"data: [DONE]\n\n"
                return
            if failing and sent >= cfg.fail_after_tokens:
                yield _sse({"error": {"message": f"synthetic failure after {sent} tokens", "type": "server_error"}})
                break
            if cfg.stall_s and sent == cfg.stall_after_tokens and sent > 0:
                await asyncio.sleep(cfg.stall_s)
                next_at = time.perf_counter()
            k = min(cfg.pack, max_tokens - sent)
            next_at += k * cfg.itl_ms / 1000  # absolute schedule: the true gaps are exactly k * itl
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            if not self._decode_open.is_set():
                await self._decode_open.wait()
                next_at = time.perf_counter()
            ids = [self.token_id(digest, sent + j, perturbed) for j in range(k)]
            sent += k
            choice: dict[str, Any] = {
                "index": 0,
                "text": "".join(f" t{i}" for i in ids),
                "logprobs": None,
                "finish_reason": "length" if sent >= max_tokens else None,
            }
            if want_ids:
                choice["token_ids"] = ids
            yield _sse(
                {
                    "id": f"cmpl-{request_id}",
                    "object": "text_completion",
                    "model": "synthetic",
                    "choices": [choice],
                    "synthetic_t": time.perf_counter(),
                }
            )
        yield _sse(
            {
                "id": f"cmpl-{request_id}",
                "object": "text_completion",
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": sent,
                    "total_tokens": prompt_tokens + sent,
                    **({"prompt_tokens_details": {"cached_tokens": hit.cached_tokens}} if self.cache.enabled else {}),
                },
            }
        )
        self.cache.keep(prompt)
        yield b"data: [DONE]\n\n"

    def _maybe_die(self) -> None:
        if self.config.die_after_s > 0 and not self._dying:
            self._dying = True
            asyncio.get_running_loop().call_later(self.config.die_after_s, _die)


def _die() -> None:
    print("synthetic: dying on purpose (--die-after-s)", file=sys.stderr, flush=True)
    os._exit(3)


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def build_app(config: SyntheticConfig):  # -> starlette.applications.Starlette
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    engine = SyntheticEngine(config)
    counter = iter(range(1, 1 << 62))

    def error(status: int, message: str, param: str | None = None) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}},
            status_code=status,
        )

    async def health(_: Request) -> JSONResponse:
        if time.monotonic() - engine.started < config.health_delay_s or (
            config.hold_while and os.path.exists(config.hold_while)
        ):
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def models(_: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": "synthetic", "object": "model", "owned_by": config.owned_by, "max_model_len": config.ctx}
                ],
            }
        )

    async def engine_info(_: Request) -> JSONResponse:
        if not config.token_ids:
            return error(404, "no such endpoint")
        return JSONResponse(
            {
                "model": "synthetic",
                "executor": "synthetic",
                "batch": config.batch,
                "ctx": config.ctx,
                "vocab_size": config.vocab_size,
                "eos_token_id": 0,
                "supports_token_ids": True,
                "mode": config.mode,
                "piece_tokens": config.piece_tokens,
                "version": "synthetic",
            }
        )

    async def events(request: Request) -> PlainTextResponse:
        if not config.token_ids:
            return error(404, "no such endpoint")
        since = int(request.query_params.get("since", "0"))
        body = "".join(json.dumps(e) + "\n" for e in engine.events[since:])
        return PlainTextResponse(
            body, media_type="application/x-ndjson", headers={"X-Strata-Next-Index": str(len(engine.events))}
        )

    async def completions(request: Request):
        try:
            body = await request.json()
        except ValueError:
            return error(400, "body is not JSON")
        prompt, max_tokens = body.get("prompt"), body.get("max_tokens", 16)
        if prompt is None or prompt == "" or prompt == []:
            return error(400, "prompt is required", "prompt")
        if isinstance(prompt, list) and not config.token_ids:
            return error(400, "this server takes text prompts only", "prompt")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return error(400, "max_tokens must be an integer >= 1", "max_tokens")
        request_id = request.headers.get("x-request-id") or f"req{next(counter)}"
        if config.uuid_request_ids and request.headers.get("x-request-id"):
            try:
                uuid.UUID(request_id)
            except ValueError:
                return error(400, "")
        if config.fail_match and config.fail_match in request_id and config.fail_after_tokens == 0:
            return JSONResponse(
                {"error": {"message": "synthetic failure", "type": "server_error", "param": None, "code": None}},
                status_code=500,
            )
        want_ids = bool(body.get("return_token_ids")) and config.token_ids
        return StreamingResponse(
            engine.stream(request_id, prompt, max_tokens, want_ids), media_type="text/event-stream"
        )

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/v1/engine", engine_info),
        Route("/v1/events", events),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
    return Starlette(routes=routes)


_HELP = {
    "itl_ms": "ms between a stream's events",
    "pack": "tokens per SSE event",
    "read_ms_per_token": "prompt read time per token (reads go one at a time)",
    "mode": "release: streams stop for a whole read; pieces: per piece; free: never",
    "piece_tokens": "pieces mode: tokens per piece",
    "piece_decode_ms": "pieces mode: decode time between pieces",
    "vocab_size": "token ids are below this",
    "ctx": "context reported by /v1/engine and /v1/models",
    "batch": "slots reported by /v1/engine",
    "token_ids": "false: a plain OpenAI server (text only, no /v1/engine)",
    "fail_match": "requests whose X-Request-Id contains this fail",
    "fail_after_tokens": "0: HTTP 500 up front; k: an error event after k tokens",
    "stall_after_tokens": "every request pauses once after this many tokens",
    "stall_s": "for this long",
    "perturb_match": "requests whose X-Request-Id contains this get other tokens",
    "perturb_from": "from this index",
    "die_after_s": "exit(3) this long after the first completion request",
    "health_delay_s": "/health answers 503 for this long after start",
    "hold_while": "a path: /health answers 503 while it exists",
    "owned_by": "GET /v1/models' owned_by (me: llama-cpp-python, vllm, sglang)",
    "uuid_request_ids": "a non-UUID X-Request-Id gets HTTP 400 with an empty message (llama-cpp-python)",
    "end_early_after": "k > 0: streams end with [DONE] after k tokens and no finish_reason",
    "prompt_cache_tokens": "> 0: a prefix cache of this many tokens (hits read only the rest; usage says cached_tokens)",
}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, SyntheticConfig]:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.synthetic", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    defaults = SyntheticConfig()
    for name, value in vars(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(
                flag,
                type=lambda s: s.lower() in ("1", "true", "yes"),
                default=value,
                help=f"{_HELP[name]} (default {value})",
            )
        else:
            parser.add_argument(flag, type=type(value), default=value, help=f"{_HELP[name]} (default {value})")
    args = parser.parse_args(argv)
    fields = {k: getattr(args, k) for k in vars(defaults)}
    try:
        return args, SyntheticConfig(**fields)
    except ValueError as exc:
        parser.error(str(exc))
        raise


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args, config = parse_args(argv)
    print(f"synthetic: serving on http://{args.host}:{args.port} ({config.mode})", file=sys.stderr, flush=True)
    uvicorn.run(build_app(config), host=args.host, port=args.port, log_level="warning", access_log=False)
