"""Errors a caller of the engine can act on.

`RequestError`: one request is invalid (a bad parameter, a prompt over the context); `field` names the
parameter, so the HTTP layer can answer an OpenAI-style 400 that points at it. Other requests go on.
"""

from __future__ import annotations


class RequestError(ValueError):
    """A request is invalid; `field` names the offending parameter (used for OpenAI-style 4xx)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field
