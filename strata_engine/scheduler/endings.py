"""How a request ends inside the scheduler: its tokens reach the sink, one finish, its slot freed after.

Contract: `on_token` appends a sampled token and asks the sink whether it ends the request (the engine
decides: `finish.finish_reason`); a sink that raises fails that request alone, and one that lets the
context fill without ending it fails it too. `finish` ends a request exactly once (FINISH event, one
`sink.on_finish`); its slot is freed by `release` after the executor call it ended in has returned (the
prompt cache then records what the slot still holds).
Called on the executor's thread (tokens) and the step thread (everything else).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Protocol

from ..tokens import SampledToken
from .protocol import Executor
from .intake import Intake
from .request import Phase, Request
from .slots import SlotTable


class Sink(Protocol):
    def on_token(self, request: Request, token: SampledToken) -> str | None:
        """Decide whether this token (already appended to request.output_ids) ends the request: "stop",
        "length" or None. The sink must end it by the context's end (the request fails otherwise)."""

    def on_finish(self, request: Request) -> None:
        """The request ended (request.finish_reason: stop, length, cancelled or error; request.error)."""


class Endings:
    def __init__(
        self,
        ctx: int,
        sink: Sink,
        intake: Intake,
        emit: Callable[..., None],
        counts: dict[str, int],
        on_release: Callable[[Request, int], None] | None = None,
    ):
        self.ctx, self.sink, self.intake, self.emit, self.counts = ctx, sink, intake, emit, counts
        self.on_release = on_release  # the prompt cache records what the slot keeps
        self.to_release: list[Request] = []  # finished inside an executor call; slot freed after it

    def on_token(self, request: Request, token: SampledToken) -> None:
        """Called by the executor for every sampled token (possibly on its own thread)."""
        if request.phase is Phase.FINISHED:
            return
        request.output_ids.append(token.token_id)
        try:
            reason = self.sink.on_token(request, token)
        except Exception as exc:
            self.finish(request, "error", exc)
            return
        if reason is None and request.prompt_tokens + request.tokens_generated >= self.ctx:
            self.finish(
                request,
                "error",
                RuntimeError(f"the context ({self.ctx} tokens) is full and the sink did not end the request"),
            )
        elif reason is not None:
            self.finish(request, reason)

    def finish(self, request: Request, reason: str, exc: BaseException | None = None) -> None:
        request.phase = Phase.FINISHED
        request.finish_reason = reason
        if exc is not None:
            request.error = f"{type(exc).__name__}: {exc}"
        self.intake.retire(request)
        self.counts["finished"] += 1
        fields: dict[str, Any] = {"reason": reason, "tokens_generated": request.tokens_generated}
        if request.error:
            fields["error"] = request.error.replace(" ", "_")[:200]  # one token on the log line
        self.emit("FINISH", request, **fields)
        try:
            self.sink.on_finish(request)
        except Exception as sink_exc:  # the sink's failure must not take the scheduler down
            warnings.warn(f"sink.on_finish failed for {request.request_id}: {sink_exc!r}", RuntimeWarning, stacklevel=2)
        if request.slot is not None:
            self.to_release.append(request)

    def release(self, slots: SlotTable, executor: Executor) -> None:
        """Free the slots of requests that finished (step thread, between executor calls)."""
        while self.to_release:
            request = self.to_release.pop()
            slot = request.slot
            if slot is None or slots.owner(slot) is not request:
                continue
            slots.release(slot)
            if self.on_release is not None:
                self.on_release(request, slot)
            try:
                executor.free_slot(slot)
            except Exception as exc:
                warnings.warn(f"executor.free_slot({slot}) failed: {exc!r}", RuntimeWarning, stacklevel=2)
