"""Helpers shared by the server tests: wait for a condition, read one metric from /metrics."""
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
