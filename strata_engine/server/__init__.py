"""The OpenAI-compatible HTTP server (docs/API.md): `create_app` builds the app, `run.serve` runs it."""

from .app import create_app

__all__ = ["create_app"]
