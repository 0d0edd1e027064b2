"""What the HTTP fake engine's routes share (fakes.http_engine): the event log, the counters, the prefix
cache, and the reader.

Contract: `Fake.emit` appends an engine event (GET /v1/events) and logs it to stderr; the reader takes the
waiting `Job`s one at a time in `--piece`-token pieces at `--read-ms-per-token`, closes `decode_allowed`
while a piece is read (decoding pauses, as in strata-engine), emits READ_START, PIECE, READ_DONE, and at a
piece's end lets a waiting prompt under half as long take over (YIELDED, then RESUME) unless `--no-yield`;
a job's `read` future is set when its prompt has been read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

from strata_bench.synthetic.cache import PrefixCache
from strata_engine.events import EngineEvent


@dataclass
class Job:
    request_id: str
    prompt: list[int]
    read: asyncio.Future
    tokens_read: int = 0
    started: bool = False
    t_start: float = 0.0
    first_out: asyncio.Event = field(default_factory=asyncio.Event)  # its first token passed the decode gate


@dataclass
class Fake:
    args: argparse.Namespace
    events: list[dict] = field(default_factory=list)
    waiting: list[Job] = field(default_factory=list)
    completions: int = 0
    in_flight: int = 0
    running: int = 0  # streams the engine serves now (the counters of GET /metrics)
    queued: int = 0  # streams waiting for the engine (--serial)
    stalled: bool = False  # --stall-second-ms was spent
    sampled: int = 0  # sampled (temperature > 0) requests so far (--sample-fault advance)
    bursts: int = 0  # sampled requests delivered in one burst so far (--burst-sampled)
    store_hits: int = 0  # hits the cache served from "the store" (GET /v1/engine prompt_cache.store_hits)
    cache: PrefixCache | None = None

    def __post_init__(self) -> None:
        if self.args.prompt_cache is not None:
            self.cache = PrefixCache(
                int(self.args.prompt_cache * self.args.cache_tokens_per_mib),
                fault=self.args.cache_fault if self.args.cache_fault == "one-too-far" else "",
            )
        self.decode_allowed = asyncio.Event()
        self.decode_allowed.set()
        self.wake = asyncio.Event()
        self.new_event = asyncio.Condition()
        self.serial_lock = asyncio.Lock()

    async def emit(self, kind: str, request_id: str | None, **fields) -> None:
        event = EngineEvent(kind, time.monotonic(), fields.pop("slot", None), request_id, fields)
        self.events.append({"index": len(self.events), **event.to_dict()})
        print(event.log_line(), file=sys.stderr, flush=True)
        async with self.new_event:
            self.new_event.notify_all()

    async def emit_piece(self, job: Job, tokens: int, decode_ms: float) -> None:
        """A PIECE event: `tokens` read, then `decode_ms` of decoding (the decode steps that fit in it)."""
        await self.emit(
            "PIECE",
            job.request_id,
            tokens=tokens,
            tokens_read=job.tokens_read,
            read_ms=tokens * self.args.read_ms_per_token,
            decode_ms=decode_ms,
            decode_steps=int(decode_ms // self.args.decode_ms) if decode_ms else 0,
        )

    async def read_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.waiting:
                await self.read(self.waiting.pop(0))

    async def read(self, job: Job) -> None:
        piece = self.args.piece or len(job.prompt)
        if not job.started:
            job.started, job.t_start = True, time.monotonic()
            await self.emit("READ_START", job.request_id, tokens=len(job.prompt))
        while job.tokens_read < len(job.prompt):
            tokens = min(piece, len(job.prompt) - job.tokens_read)
            self.decode_allowed.clear()  # decoding waits while a piece goes through the pipeline
            await asyncio.sleep(tokens * self.args.read_ms_per_token / 1000)
            self.decode_allowed.set()
            job.tokens_read += tokens
            if not self.args.piece or job.tokens_read >= len(job.prompt):
                break
            await asyncio.sleep(self.args.decode_budget_ms / 1000)  # the decode budget after a piece
            await self.emit_piece(job, tokens, self.args.decode_budget_ms)
            taker = next((w for w in self.waiting if 2 * len(w.prompt) < len(job.prompt)), None)
            if taker is not None and not self.args.no_yield:
                self.waiting.remove(taker)
                await self.emit("YIELDED", job.request_id, slot=2, tokens_read=job.tokens_read, to=taker.request_id)
                await self.read(taker)
                # The taker's first token goes out before the long read blocks decoding again, as a real engine's
                # would; without this wait the next piece could close the gate first (a race under load).
                try:
                    await asyncio.wait_for(taker.first_out.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    pass  # its client went away
                await self.emit("RESUME", job.request_id, tokens_read=job.tokens_read)
        if self.args.piece and len(job.prompt) > 0:
            last = len(job.prompt) - (len(job.prompt) - 1) // piece * piece
            await self.emit_piece(job, last, 0.0)
        await self.emit(
            "READ_DONE",
            job.request_id,
            tokens=len(job.prompt),
            read_ms=round((time.monotonic() - job.t_start) * 1000, 3),
        )
        job.read.set_result(True)
