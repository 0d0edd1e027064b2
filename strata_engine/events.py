"""Engine events: the scheduler's observable decisions (pieces, lead-ins, give-ways, stops).

Each event is one parseable stderr line (`STRATA <KIND> key=value ...`) and also a dict the server
exposes as JSON lines, so the bench and verify read the same facts a human reads in the log.
The give-way line keeps the spec's literal form: `YIELDED <slot> <tokens_read>`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

# Kinds. A read is split into PIECEs; LEADIN is the decode budget before a read that follows a read;
# YIELDED is a give-way (BYIELD); BSTOP a cancelled read/request freed; READ_START/READ_DONE bracket a
# prompt read; ADMIT/FINISH bracket a request's life in a slot; MIX is a mixed read's run, TARGET a pause-target run.
# The prompt cache: CACHE_HIT (a request keeps `tokens` prompt tokens from `source` "slot" or "store"),
# CACHE_EVICT (a prefix leaves a slot, source "slot", `to` "store" or "dropped"; or leaves the store, source
# "store", `reason` "lru", "covered" by a longer one, "memory" or "failed"), each with its tokens and bytes;
# CACHE_CHECKPOINT (`of` "read": a read's window before its last whole chunk's end; "shared prefix": the window of
# a prefix another prompt shares; positions [first, tokens), `to` "store" or "dropped").
KINDS = (
    "ADMIT",
    "READ_START",
    "PIECE",
    "TARGET",
    "LEADIN",
    "YIELDED",
    "RESUME",
    "BSTOP",
    "READ_DONE",
    "FINISH",
    "MIX",
    "CACHE_HIT",
    "CACHE_EVICT",
    "CACHE_CHECKPOINT",
)


@dataclass(frozen=True)
class EngineEvent:
    kind: str
    t: float  # seconds on the engine's clock (monotonic)
    slot: int | None = None
    request_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "slot": self.slot, "request_id": self.request_id, **self.fields}

    def log_line(self) -> str:
        if self.kind == "YIELDED":  # the spec's literal form, then our key=values
            head = f"YIELDED {self.slot} {self.fields.get('tokens_read', 0)}"
        else:
            head = f"STRATA {self.kind}"
            if self.slot is not None:
                head += f" slot={self.slot}"
        kv = " ".join(f"{k}={_fmt(v)}" for k, v in self.fields.items())
        rid = f" request={self.request_id}" if self.request_id else ""
        return f"{head}{rid} {kv}".rstrip()


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


class EventLog:
    """Thread-safe append-only list of events with subscribers (the server's JSON-lines feed)."""

    def __init__(self, echo: Callable[[str], None] | None = None, keep: int = 100_000):
        self._events: list[EngineEvent] = []
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[EngineEvent], None]] = []
        self._echo = echo
        self._keep = keep
        self._dropped = 0

    def emit(self, event: EngineEvent) -> None:
        with self._lock:
            self._events.append(event)
            if len(self._events) > self._keep:
                drop = len(self._events) - self._keep
                del self._events[:drop]
                self._dropped += drop
            subscribers = list(self._subscribers)
        if self._echo is not None:
            self._echo(event.log_line())
        for fn in subscribers:
            fn(event)

    def subscribe(self, fn: Callable[[EngineEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def since(self, index: int = 0) -> tuple[list[EngineEvent], int]:
        """Events with absolute index >= index, and the next index to ask for."""
        with self._lock:
            start = max(0, index - self._dropped)
            return list(self._events[start:]), self._dropped + len(self._events)

    def of_kind(self, kind: str) -> list[EngineEvent]:
        with self._lock:
            return [e for e in self._events if e.kind == kind]
