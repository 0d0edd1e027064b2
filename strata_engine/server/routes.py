"""POST /v1/completions and /v1/chat/completions: parse, submit, answer (whole or one SSE event per token).

A streamed token's event is sent at once unless the engine marked the token as the request's last
(`TokenOutput.finish_reason`); then it waits for the engine's Finished, which follows at once, so the
last token's event carries `finish_reason` as docs/API.md requires. The engine decides; this renders.
"""

from __future__ import annotations

import logging
import re
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from ..errors import RequestError
from .state import ServerState, read_json
from .errors import APIError, from_validation_error
from .protocol import ChatRequest, CompletionRequest, check_max_tokens
from .relay import EventStream, Relay, sse
from .render import Render, dumps

log = logging.getLogger("strata_engine.server")
router = APIRouter()

REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # it appears in space-separated log lines
DONE = sse("[DONE]")


def _parse(model: type[BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as err:
        raise from_validation_error(err) from None


def _request_id(request: Request, state: ServerState) -> str | None:
    rid = request.headers.get("x-request-id")
    if rid is None:
        return None
    if not REQUEST_ID.match(rid):
        raise APIError(400, "X-Request-Id must be 1-128 characters of letters, digits and . _ : -", "X-Request-Id")
    if rid in state.relays:
        raise APIError(400, f"request id '{rid}' is already in flight", "X-Request-Id")
    return rid


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    state: ServerState = request.app.state.strata
    req: CompletionRequest = _parse(CompletionRequest, await read_json(request, state.max_body_bytes))
    state.check_model(req.model)
    engine = state.require_engine()
    max_tokens = req.max_tokens
    if "max_tokens" not in req.model_fields_set:  # OpenAI's default of 16, within a tiny context too
        max_tokens = min(16, engine.ctx)
    elif max_tokens is None:  # explicit null: until the context is full (the engine ends it there)
        max_tokens = engine.ctx
    check_max_tokens(max_tokens, engine.ctx)
    params = _params(req, max_tokens, req.logprobs)
    return await _answer(request, state, "completion", req, req.prompt, params, logprobs=req.logprobs is not None)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    state: ServerState = request.app.state.strata
    req: ChatRequest = _parse(ChatRequest, await read_json(request, state.max_body_bytes))
    state.check_model(req.model)
    engine = state.require_engine()
    prompt = req.prompt_text()
    field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is None:  # until the context is full (the engine ends it there)
        max_tokens = engine.ctx
    check_max_tokens(max_tokens, engine.ctx, field)
    k = _guard(req.logprobs_k)
    params = _params(req, max_tokens, k)
    return await _answer(request, state, "chat", req, prompt, params, logprobs=k is not None)


def _guard(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except RequestError as err:
        raise APIError.from_request_error(err) from None


def _params(req: Any, max_tokens: int, logprobs: int | None) -> Any:
    return _guard(req.sampling_params, max_tokens, logprobs)


async def _answer(
    request: Request, state: ServerState, kind: str, req: Any, prompt: Any, params: Any, logprobs: bool
) -> Response:
    relay = Relay(state, _request_id(request, state))
    try:
        relay.submit(prompt, params)
    except RequestError as err:
        raise APIError.from_request_error(err) from None
    except Exception as err:  # one request's failure is a 500 for it alone
        log.exception("engine.submit failed")
        raise APIError.internal(err) from None
    engine = state.engine
    render = Render(
        kind=kind,
        request_id=relay.request_id,
        model=state.model_name,
        prompt_ids=(),
        token_str=lambda tid: engine.tokenizer.decode([tid]),
        return_token_ids=req.return_token_ids,
        logprobs=logprobs,
    )
    headers = {"X-Request-Id": relay.request_id}
    if req.stream:
        prompt_tokens = relay.handle.prompt_tokens if req.continuous_usage else None
        events = _stream(relay, render, req.include_usage, prompt_tokens)
        return EventStream(events, relay, headers=headers)
    completion = await relay.completion(request.receive)
    if completion is None:  # the client left; nobody reads this
        return Response(status_code=499)
    if completion.finish_reason == "error":
        raise APIError(
            500, f"request {relay.request_id} failed: {completion.error or 'engine error'}", type="server_error"
        )
    return JSONResponse(render.response(completion), headers=headers)


async def _stream(relay: Relay, render: Render, include_usage: bool, prompt_tokens: int | None) -> AsyncIterator[bytes]:
    """SSE bytes: one event per token, the finish reason on the last, the usage event, then [DONE].
    Raises APIError before the first event if the request fails at once (EventStream sends a 500)."""
    generated = 0

    def event(tokens: list[Any], finish: str | None, tail: str = "", prompt_ids: Any = None) -> bytes:
        if finish is None and prompt_tokens is None and len(tokens) == 1:
            return render.token_event(tokens[0])
        usage = (
            render.usage(generated, prompt_tokens, relay.handle.cached_tokens) if prompt_tokens is not None else None
        )
        return sse(dumps(render.chunk(tokens, finish, usage, tail, prompt_ids)))

    pending = None  # a token whose event waits until we know whether it is the last
    out: list[bytes] = []  # events ready to send; the tokens already queued go out in one write
    while True:
        item = relay.next_nowait()
        if item is None:
            if pending is not None and pending.finish_reason is None:  # not the last token: send it now
                out.append(event([pending], None))
                pending = None
            if out:
                yield b"".join(out)
                out = []
            item = await relay.next()
            if item is None:  # client gone: EventStream stops sending
                return
        completion = getattr(item, "completion", None)
        if completion is None:  # a token
            if pending is not None:
                out.append(event([pending], None))
            pending = item
            generated += 1
            continue
        if completion.finish_reason == "cancelled" and relay.stopped_by:
            # The server stopped it (shutdown): say so in the stream, never end it as if it were complete.
            if pending is not None:
                out.append(event([pending], None))
            message = f"request {relay.request_id} stopped after {generated} tokens: {relay.stopped_by}"
            out.append(sse(dumps(APIError(503, message, type="server_shutdown").body())))
        elif completion.finish_reason == "error":
            message = f"request {relay.request_id} failed: {completion.error or 'engine error'}"
            if generated == 0:
                raise APIError(500, message, type="server_error")
            if pending is not None:
                out.append(event([pending], None))
            out.append(sse(dumps(APIError(500, message, type="server_error").body())))
        else:
            # The finish rides on the last token's event when it is still pending; after an EOS (not an
            # output token) or a stop string found late it comes in one more event with no token, even when
            # the token before it and the Finished arrived together (the engine did not mark that token last).
            if pending is not None and pending.finish_reason is None:
                out.append(event([pending], None))
                pending = None
            out.append(
                event(
                    [pending] if pending is not None else [],
                    completion.finish_reason,
                    getattr(item, "unsent_text", ""),
                    completion.prompt_token_ids,
                )
            )
            if include_usage:
                out.append(
                    sse(
                        dumps(
                            render.usage_chunk(
                                len(completion.token_ids), len(completion.prompt_token_ids), completion.cached_tokens
                            )
                        )
                    )
                )
        out.append(DONE)
        yield b"".join(out)
        return
