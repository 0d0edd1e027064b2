"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}`.

Every failure the HTTP layer reports goes through `APIError`, so a client always gets one JSON shape
naming the offending field; 422 is never used (validation errors are 400, as docs/API.md says).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import RequestError

log = logging.getLogger("strata_engine.server")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    """One failed request: an HTTP status, a message, and the request field at fault (or None)."""

    def __init__(self, status: int, message: str, param: str | None = None, type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type or _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": None}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)

    @classmethod
    def from_request_error(cls, err: RequestError) -> "APIError":
        return cls(400, str(err), err.field)

    @classmethod
    def internal(cls, err: BaseException) -> "APIError":
        return cls(500, f"internal error: {type(err).__name__}: {err}", None, "server_error")


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "body", "query", "header"})


def _loc_name(loc: tuple[Any, ...]) -> str:
    """('prompt', 3) -> 'prompt[3]'; ('stream_options', 'foo') -> 'stream_options.foo'. Union member tags
    that pydantic puts in the path ('str', 'list[TextPart]') are not fields and are left out."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif re.fullmatch(r"[a-z_][a-z0-9_]*", str(part)) and part not in _TYPE_TAGS:
            name += f".{part}" if name else str(part)
    return name or "body"


def from_validation_error(err: ValidationError | RequestValidationError) -> APIError:
    """The first pydantic error, phrased for a person, with the field path as `param`."""
    first = err.errors()[0]
    loc = tuple(first.get("loc", ()))
    name = _loc_name(loc)
    if first.get("type") == "extra_forbidden":  # the unknown name itself may be any string
        parent = _loc_name(loc[:-1]) if len(loc) > 1 else ""
        name = f"{parent}.{loc[-1]}" if parent and parent != "body" else str(loc[-1])
        return APIError(400, f"unknown field '{name}': this server does not accept it", name)
    if first.get("type") == "missing":
        return APIError(400, f"'{name}' is required", name)
    msg = first.get("msg", "invalid value")
    if "input" in first and first.get("type") != "value_error":
        msg += f" (got {_short(first['input'])})"
    return APIError(400, f"'{name}': {msg}", name)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into the OpenAI error body."""

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, exc: RequestError) -> JSONResponse:
        return APIError.from_request_error(exc).response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return from_validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return APIError(404, f"no such endpoint: {request.method} {request.url.path}").response()
        if exc.status_code == 405:
            return APIError(405, f"method {request.method} is not allowed on {request.url.path}").response()
        return APIError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error serving %s %s", request.method, request.url.path)
        return APIError.internal(exc).response()
