"""Helpers shared by the server tests: serve an engine on uvicorn, wait for a condition, read one metric."""

from __future__ import annotations

import time

import httpx


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def metric(url: str, name: str) -> float:
    """Sum of every sample of `name` (all label sets) in /metrics; a missing metric fails the test."""
    total, seen = 0.0, False
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    assert seen, f"{name} missing from /metrics"
    return total


def serving(engine, **app_kwargs):
    """Context manager: the app for `engine` on uvicorn in a background thread; yields (url, app)."""
    from contextlib import contextmanager

    from strata_engine.server import create_app
    from strata_engine.server.run import run_in_thread

    @contextmanager
    def _serving():
        app = create_app(engine, **app_kwargs)
        url, stop = run_in_thread(app)
        try:
            yield url, app
        finally:
            stop()

    return _serving()
