"""The ASGI middleware in front of every route: Bearer api-key check and per-endpoint request counts.

Pure ASGI (not BaseHTTPMiddleware) so streamed responses pass through untouched and a client's
disconnect still reaches the route. /health stays open so launchers can poll it without the key.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError

if TYPE_CHECKING:
    from .state import ServerState

OPEN_PATHS = frozenset({"/health"})
KNOWN_PATHS = frozenset(
    {"/health", "/metrics", "/v1/models", "/v1/engine", "/v1/events", "/v1/completions", "/v1/chat/completions"}
)


class Gate:
    def __init__(self, app: ASGIApp, state: "ServerState"):
        self.app = app
        self.state = state

    def _authorized(self, scope: Scope) -> bool:
        key = self.state.api_key
        if not key or scope["path"] in OPEN_PATHS:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
        status = [500]

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self._authorized(scope):
                await self.app(scope, receive, counting_send)
            else:
                err = APIError(401, "missing or wrong api key: send 'Authorization: Bearer <key>'")
                await err.response()(scope, receive, counting_send)
        finally:
            self.state.metrics.http_requests.labels(endpoint, str(status[0])).inc()
