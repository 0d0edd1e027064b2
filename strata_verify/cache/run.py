"""The cache check's evidence: every request it sent (phase, session, turn, prompt, the answer served with
the cache on and the same request read cold) and the engine's events per phase, when it has a feed.
`check.py` fills it; `steps.py` judges it; neither imports the other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from strata_verify.cache.plan import CacheOptions, Prompts
from strata_verify.client import Completion
from strata_verify.engine_proc import Target
from strata_verify.report import Step

PHASES = ("sessions", "give-way", "restore", "salts", "eviction")


@dataclass
class Turn:
    name: str  # "s0.t2": session s0's third turn; "long": the give-way phase's long cold read
    phase: str
    session: str
    turn: int
    prompt: list[int]
    served: Completion  # with the cache on
    cold: Completion | None = None  # the same request read cold
    salt: str | None = None  # the salts phase: which of its salts ("a", "b") this request carried; None: none

    def hit(self, events: list[dict[str, Any]] | None) -> tuple[int, str] | None:
        """(cached tokens, where that was read) when the server says a cache served this request: usage's
        cached_tokens > 0, else a CACHE_HIT event for its id; None when neither says so."""
        cached = self.served.cached_prompt_tokens
        if cached:
            return cached, "usage.prompt_tokens_details.cached_tokens"
        for event in events or ():
            if event.get("kind") == "CACHE_HIT" and event.get("request_id") == self.served.request_id:
                return int(event.get("tokens") or 0), f"CACHE_HIT event (source {event.get('source', '?')})"
        return None


@dataclass
class CacheRun:
    target: Target
    options: CacheOptions
    nonce: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    prompts: Prompts | None = None
    feed: bool = False  # events followed (Strata's feed, not declared absent)
    salt: str | None = None  # the body field that reads a request cold on this server, when the gate adds it
    salt_field_ok: bool = False  # the server takes its family's salt field (the salts phase runs)
    store_counts: tuple[Any, Any] | None = None  # prompt_cache before and after the restore phase (GET /v1/engine)
    cold_how: str = ""
    cache_info: Any = None  # GET /v1/engine's prompt_cache, as served
    evict_cache_info: Any = None  # the same of the eviction phase's engine, when it has its own
    turns: dict[str, Turn] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]] | None] = field(default_factory=dict)  # per phase; None: no feed
    t0: float = 0.0
    give_way_attempts: int = 0  # long reads sent in the give-way phase (again when the turn came too late)
    steps: list[Step] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, turn: Turn) -> None:
        with self._lock:
            self.turns[turn.name] = turn

    def of(self, phase: str) -> list[Turn]:
        return [t for t in self.turns.values() if t.phase == phase]

    def request_id(self, name: str, cold: bool) -> str:
        return f"verify-cache-{self.nonce}-{'cold-' if cold else ''}{name}"

    def rel(self, t: float | None) -> str:
        return "n/a" if t is None else f"+{t - self.t0:.3f} s"

    def to_dict(self) -> dict[str, Any]:
        def answer(c: Completion | None) -> dict[str, Any] | None:
            if c is None:
                return None
            return {
                "request_id": c.request_id,
                "token_ids": c.token_ids,
                "logprobs": c.logprobs,
                "usage": c.usage,
                "sent_at": None if c.sent_at is None else round(c.sent_at - self.t0, 6),
                "first_token_at": None if c.first_token_at is None else round(c.first_token_at - self.t0, 6),
            }

        return {
            "target": self.target.describe(),
            "engine": self.info,
            "cold": self.cold_how,
            "prompt_cache": self.cache_info,
            "plan": self.options.plan.describe(),
            "store_counts": self.store_counts,
            "turns": {
                n: {
                    "phase": t.phase,
                    "salt": t.salt,
                    "prompt_tokens": len(t.prompt),
                    "served": answer(t.served),
                    "cold": answer(t.cold),
                }
                for n, t in self.turns.items()
            },
            "events": {
                p: None if e is None else [{k: v for k, v in x.items() if k != "_arrived"} for x in e]
                for p, e in self.events.items()
            },
        }
