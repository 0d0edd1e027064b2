"""Requests in: the FIFO of waiting requests, the set of live ones, and cancels; thread-safe.

Contract: `add` validates a new request against the context (RequestError naming the field) and queues
it; `cancel` marks a live request and bumps an epoch that an idle decode watches. The scheduler's step
thread takes snapshots (`waiting`), removes what it admits or drops (`remove`) and retires what ends
(`retire`). One lock guards all of it; nothing here runs a model or emits an event.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

from ..errors import RequestError
from .request import Phase, Request


class Intake:
    def __init__(self, ctx: int, clock: Callable[[], float]):
        self.ctx = ctx
        self.clock = clock
        self._lock = threading.Lock()
        self._waiting: deque[Request] = deque()
        self._live: dict[str, Request] = {}  # every request not yet finished, by id
        self._cancel_epoch = 0  # bumped by cancel()

    def add(self, request: Request) -> None:
        """Queue a new request (FIFO). Raises RequestError for one the context cannot hold."""
        if request.phase is not Phase.WAITING or request.slot is not None or request.tokens_read or request.output_ids:
            raise ValueError(
                f"request {request.request_id!r} is not new (phase {request.phase.value}, slot {request.slot})"
            )
        if request.prompt_tokens < 1:
            raise RequestError("prompt must not be empty", "prompt")
        if request.prompt_tokens >= self.ctx:
            raise RequestError(f"prompt has {request.prompt_tokens} tokens but the context holds {self.ctx}", "prompt")
        if request.max_tokens < 1:
            raise RequestError(f"max_tokens must be >= 1, got {request.max_tokens}", "max_tokens")
        with self._lock:
            if request.request_id in self._live:
                raise RequestError(f"request id {request.request_id!r} is already in use", "request_id")
            request.arrival = self.clock()
            self._live[request.request_id] = request
            self._waiting.append(request)

    def cancel(self, request_id: str) -> bool:
        """Mark a request cancelled; it stops at the next boundary. False if it is unknown or finished."""
        with self._lock:
            request = self._live.get(request_id)
            if request is None:
                return False
            request.cancelled = True
            self._cancel_epoch += 1
            return True

    def waiting(self) -> list[Request]:
        """The waiting requests in arrival order (a snapshot)."""
        with self._lock:
            return list(self._waiting)

    def waiting_count(self) -> int:
        with self._lock:
            return len(self._waiting)

    def remove(self, request: Request) -> None:
        """Take a waiting request out of the queue (admitted, or dropped when cancelled)."""
        with self._lock:
            self._waiting.remove(request)

    def retire(self, request: Request) -> None:
        """The request ended: its id is free again."""
        with self._lock:
            self._live.pop(request.request_id, None)

    @property
    def has_live(self) -> bool:
        with self._lock:
            return bool(self._live)

    def epoch(self) -> int:
        with self._lock:
            return self._cancel_epoch
