"""A synthetic engine server that follows docs/API.md, for fast tests of the gate's logic (no model).

Tokens are a hash of (prompt, position), so greedy answers are deterministic whatever runs beside
them. Reads take `--read-ms-per-token`, go in `--piece`-token pieces (0 = one run), and decoding
pauses while a piece is read, as in strata-engine; at a piece's end a waiting prompt under half as
long takes over (YIELDED) unless `--no-yield`. Events go to GET /v1/events and, as log lines, stderr.
`--prompt-cache MIB` keeps finished prompts (strata_bench.synthetic_cache: `--cache-tokens-per-mib` tokens a
MiB, `cache_salt` honoured): a request reads only what is not cached, says `cached_tokens` in its usage, and
CACHE_HIT / CACHE_EVICT events name hits and evictions; `--cache-fault one-too-far` plays a cache that claims
one token more than it matched (the answer is computed without that prompt token), `--cache-fault salt-leak` one
that ignores `cache_salt` (one salt's prefix served to another), `store-restore` a restore from the store that
loses its last position, `logprob-shift` a hit whose logprobs move by 0.019 while its tokens stay. GET /metrics gives the engine's counters
(`strata_requests_running`, `strata_queue_length`) unless `--no-metrics`; `--serial` runs one request at a time
(the others wait in the queue); `--stall-second-ms N` holds the first token of a request that starts while
another streams by N ms (a starved HTTP front end: the engine runs both, the client sees one).
`temperature` > 0 samples: tokens hash the seed too (a fresh one per request without `seed`), and every third
sampled position reports a runner-up above the chosen token; `stream: false` returns one JSON response.
`--sample-fault batch` mixes the requests running beside a draw into it, `--sample-fault advance` one engine-wide
generator's state (the same seed draws differently each request), `--sample-fault greedy` ignores temperature;
`--burst-sampled N` delivers the first N sampled requests' tokens in one burst; `--stream-fault last-token` renders a whole
response's last token from the next position; `--batch-fault N` changes greedy tokens from index 2 on while N or
more requests are in flight (a bucket-boundary bug).

    python tests/verify/fake_engine.py --piece 512 --host 127.0.0.1 --port 8123
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from strata_bench.synthetic_cache import PrefixCache, answer_prompt
from strata_engine.events import EngineEvent


def token_at(prompt: list[int], index: int, vocab: int, salt: str = "") -> int:
    digest = hashlib.sha256(f"{salt}{prompt}|{index}".encode()).digest()
    return 1 + int.from_bytes(digest[:4], "little") % (vocab - 1)


def logprobs_at(prompt: list[int], index: int) -> tuple[float, float]:
    """(chosen logprob, top-2 margin), deterministic per position."""
    digest = hashlib.sha256(f"lp|{prompt}|{index}".encode()).digest()
    return -(digest[0] / 128.0), 0.05 + digest[1] / 64.0


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
            await self.emit(
                "PIECE",
                job.request_id,
                tokens=tokens,
                tokens_read=job.tokens_read,
                read_ms=tokens * self.args.read_ms_per_token,
                decode_ms=self.args.decode_budget_ms,
                decode_steps=int(self.args.decode_budget_ms // self.args.decode_ms),
            )
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
            await self.emit(
                "PIECE",
                job.request_id,
                tokens=last,
                tokens_read=job.tokens_read,
                read_ms=last * self.args.read_ms_per_token,
                decode_ms=0.0,
                decode_steps=0,
            )
        await self.emit(
            "READ_DONE",
            job.request_id,
            tokens=len(job.prompt),
            read_ms=round((time.monotonic() - job.t_start) * 1000, 3),
        )
        job.read.set_result(True)


def build_app(args: argparse.Namespace) -> FastAPI:
    state: dict[str, Fake] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        state["fake"] = Fake(args)
        reader = asyncio.get_running_loop().create_task(state["fake"].read_loop())
        yield
        reader.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [{"id": "fake", "object": "model", "owned_by": "strata", "max_model_len": args.ctx}],
        }

    @app.get("/v1/engine")
    async def engine():
        return {
            "model": "fake",
            "executor": "fake",
            "batch": 4,
            "batch_groups": args.groups,
            "num_stages": 2,
            "prefill_chunk": 128,
            "ctx": args.ctx,
            "piped_read_piece": args.piece,
            "decode_share": 0.5,
            "decode_min_ms": 20.0,
            "decode_max_ms": 400.0,
            "read_mix": 0,
            "decode_merge": 0,
            "pause_target_ms": 0.0,
            "device": "cpu",
            "dtype": "float32",
            "vocab_size": args.vocab,
            "eos_token_id": 0,
            "supports_token_ids": True,
            "version": "fake-1",
            "batch_invariant": args.batch_invariant,
            **(
                {}
                if args.prompt_cache is None
                else {
                    "prompt_cache": {
                        "mib": args.prompt_cache,
                        "tokens": state["fake"].cache.capacity_tokens,
                        "store": args.prompt_cache > 0,
                        "store_hits": state["fake"].store_hits,
                        "bitwise": args.batch_invariant and args.prompt_cache > 0,
                    }
                }
            ),
        }

    @app.get("/metrics")
    async def metrics():
        fake = state["fake"]
        if args.no_metrics:
            return PlainTextResponse("not found", status_code=404)
        return PlainTextResponse(
            f"# TYPE strata_requests_running gauge\nstrata_requests_running {fake.running}.0\n"
            f"# TYPE strata_queue_length gauge\nstrata_queue_length {fake.queued}.0\n"
        )

    @app.get("/v1/events")
    async def events(since: int = 0, follow: int = 0):
        fake = state["fake"]
        if args.no_events:
            return JSONResponse({"error": {"message": "no events", "type": "invalid_request_error"}}, status_code=404)
        if not follow:
            body = "".join(json.dumps(e) + "\n" for e in fake.events[since:])
            return PlainTextResponse(
                body, media_type="application/x-ndjson", headers={"X-Strata-Next-Index": str(len(fake.events))}
            )

        async def feed():
            index = since
            while True:
                while index < len(fake.events):
                    yield json.dumps(fake.events[index]) + "\n"
                    index += 1
                async with fake.new_event:
                    await fake.new_event.wait()

        return StreamingResponse(feed(), media_type="application/x-ndjson")

    @app.post("/v1/completions")
    async def completions(request: Request):
        fake = state["fake"]
        body = await request.json()
        fake.completions += 1
        if args.die_after and fake.completions > args.die_after:
            print("fake engine: simulated crash (CUDA error: an illegal memory access)", file=sys.stderr, flush=True)
            os._exit(7)
        prompt = body.get("prompt")
        prompt_ids = prompt if isinstance(prompt, list) else [b + 1 for b in str(prompt).encode()]
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        max_tokens = int(body.get("max_tokens", 16))
        if len(prompt_ids) + max_tokens > args.ctx:
            return JSONResponse(
                {
                    "error": {
                        "message": "prompt too long",
                        "type": "invalid_request_error",
                        "param": "prompt",
                        "code": None,
                    }
                },
                status_code=400,
            )
        salt = None if args.cache_fault == "salt-leak" else body.get("cache_salt")
        hit = fake.cache.lookup(prompt_ids, salt) if fake.cache is not None else None
        answer_ids = answer_prompt(prompt_ids, hit) if hit is not None else prompt_ids
        fake.store_hits += bool(hit is not None and hit.cached_tokens and hit.source == "store")
        if hit is not None and hit.cached_tokens and hit.source == "store" and args.cache_fault == "store-restore":
            answer_ids = [*prompt_ids[: hit.cached_tokens - 1], *prompt_ids[hit.cached_tokens :]]  # a stale position
        shift = 0.019 if hit is not None and hit.cached_tokens and args.cache_fault == "logprob-shift" else 0.0
        job = Job(rid, prompt_ids, asyncio.get_running_loop().create_future())
        await fake.emit("ADMIT", rid, slot=None)
        if hit is not None and hit.cached_tokens:
            job.tokens_read = hit.cached_tokens
            await fake.emit("CACHE_HIT", rid, slot=0, tokens=hit.cached_tokens, source=hit.source)
        if not args.serial:
            fake.waiting.append(job)
            fake.wake.set()
        want_lp = body.get("logprobs") is not None
        temperature = float(body.get("temperature") or 0.0)
        sampled = temperature > 0 and args.sample_fault != "greedy"  # seeded with `seed`, else fresh each request
        seed = body.get("seed") if body.get("seed") is not None else uuid.uuid4().hex
        draw = f"sample|{seed}|{temperature}|{body.get('top_p', 1.0)}|"
        if sampled and args.sample_fault == "advance":  # one generator for the engine: its state moves per request
            draw += f"n{fake.sampled}|"
        fake.sampled += sampled
        streamed = body.get("stream", True) is not False  # this fake streams unless told not to

        def token(index: int) -> int:
            salt = args.salt if index >= args.salt_from else ""
            if sampled:
                salt += draw
                if args.sample_fault == "batch" and fake.in_flight > 1:  # the draw depends on what runs beside
                    salt += f"batch{fake.in_flight}|"
            if args.batch_fault and fake.in_flight >= args.batch_fault and index >= 2:
                salt += "wide|"  # a kernel that changes shape at this many rows rounds differently
            if not streamed and args.stream_fault == "last-token" and index == max_tokens - 1:
                index += 1  # the whole response renders its last token from the wrong position
            return token_at(answer_ids, index, args.vocab, salt)

        def chunk(index: int) -> dict:
            tok = token(index)
            choice = {
                "index": 0,
                "text": f" t{tok}",
                "finish_reason": "length" if index == max_tokens - 1 else None,
                "token_ids": [tok],
                "logprobs": None,
            }
            if index == 0:
                choice["prompt_token_ids"] = prompt_ids
            if want_lp:
                lp, margin = logprobs_at(prompt_ids, index)
                lp -= shift  # logprob-shift: a hit attends to one stale position; the greedy token stays
                if args.logprob_jitter and fake.in_flight > 1:
                    lp += args.logprob_jitter  # batch-shape-dependent rounding, as a real kernel might have
                # A sampled token is not always the top-1: every third position drew the runner-up.
                alt = lp + margin if sampled and tok % 3 == 0 else lp - margin
                choice["logprobs"] = {
                    "tokens": [f" t{tok}"],
                    "token_logprobs": [lp],
                    "top_logprobs": [{f" t{tok}": lp, " alt": alt}],
                    "text_offset": [0],
                }
            return {
                "id": f"cmpl-{rid}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": "fake",
                "choices": [choice],
            }

        async def produce():
            """Each token's chunk, then the usage chunk (choices empty); the streamed and whole forms share it."""
            held = False
            if args.serial:
                fake.queued += 1
                try:
                    await fake.serial_lock.acquire()
                    held = True
                finally:
                    fake.queued -= 1
                fake.waiting.append(job)
                fake.wake.set()
            stall = bool(args.stall_second_ms) and fake.running >= 1 and not fake.stalled
            fake.stalled = fake.stalled or stall
            fake.in_flight += 1
            fake.running += 1
            burst = sampled and fake.bursts < args.burst_sampled  # a starved front end: the whole answer at once
            fake.bursts += burst
            try:
                await job.read
                for index in range(max_tokens):
                    if index and not burst:
                        await asyncio.sleep(args.decode_ms / 1000)
                    elif stall:
                        await asyncio.sleep(args.stall_second_ms / 1000)
                    await fake.decode_allowed.wait()
                    job.first_out.set()
                    yield chunk(index)
                usage = {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": max_tokens,
                    "total_tokens": len(prompt_ids) + max_tokens,
                }
                if fake.cache is not None:
                    usage["prompt_tokens_details"] = {"cached_tokens": hit.cached_tokens}
                yield {"id": f"cmpl-{rid}", "object": "text_completion", "choices": [], "usage": usage}
                await fake.emit("FINISH", rid)
                if fake.cache is not None:  # the slot keeps the prompt and the answer's tokens
                    answer = [token_at(answer_ids, i, args.vocab) for i in range(max_tokens - 1)]
                    for tokens in fake.cache.keep(prompt_ids + answer, salt):
                        await fake.emit("CACHE_EVICT", None, slot=0, tokens=tokens)
            finally:
                fake.in_flight -= 1
                fake.running -= 1
                if held:
                    fake.serial_lock.release()

        async def stream():
            async for event in produce():
                yield f"data: {json.dumps(event)}\n\n"
            yield "data: [DONE]\n\n"

        if not streamed:  # one JSON response: the choices' fields joined, as OpenAI's non-streaming form
            events = [event async for event in produce()]
            choices = [e["choices"][0] for e in events if e["choices"]]
            whole = {
                "index": 0,
                "text": "".join(c["text"] for c in choices),
                "finish_reason": choices[-1]["finish_reason"],
                "token_ids": [t for c in choices for t in c["token_ids"]],
                "prompt_token_ids": prompt_ids,
                "logprobs": None,
            }
            if want_lp:
                whole["logprobs"] = {
                    key: [v for c in choices for v in c["logprobs"][key]]
                    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")
                }
            return JSONResponse(
                {
                    **{k: v for k, v in events[-1].items() if k != "usage"},
                    "choices": [whole],
                    "usage": events[-1]["usage"],
                }
            )
        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--piece", type=int, default=512, help="tokens per read piece; 0 = one run")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--read-ms-per-token", type=float, default=0.2)
    parser.add_argument("--decode-ms", type=float, default=5.0)
    parser.add_argument("--decode-budget-ms", type=float, default=40.0)
    parser.add_argument("--salt", default="", help="a different 'build': other (still deterministic) answers")
    parser.add_argument("--salt-from", type=int, default=0, help="the salt changes tokens from this index on")
    parser.add_argument("--no-yield", action="store_true")
    parser.add_argument("--no-events", action="store_true")
    parser.add_argument("--batch-invariant", action="store_true")
    parser.add_argument("--logprob-jitter", type=float, default=0.0)
    parser.add_argument("--die-after", type=int, default=0, help="exit after N completions (0 = never)")
    parser.add_argument("--fail-start", action="store_true", help="write an error to stderr and exit 3")
    parser.add_argument(
        "--prompt-cache",
        type=float,
        default=None,
        help="MiB of prefix cache (0 = off); unset: an engine without one (no cached_tokens in usage)",
    )
    parser.add_argument("--cache-tokens-per-mib", type=int, default=512)
    parser.add_argument(
        "--cache-fault",
        default="",
        help="one-too-far: a hit claims one token more than it matched; "
        "salt-leak: cache_salt is ignored (prefixes cross salts); store-restore: a hit from the store "
        "answers without its last cached position; logprob-shift: a hit's logprobs move 0.019, "
        "its tokens do not",
    )
    parser.add_argument(
        "--sample-fault",
        default="",
        choices=("", "batch", "advance", "greedy"),
        help="batch: a seeded draw depends on the requests running beside it; advance: one generator "
        "for the engine, so the same seed draws differently on every request; greedy: temperature "
        "is ignored",
    )
    parser.add_argument(
        "--batch-fault",
        type=int,
        default=0,
        help="greedy tokens from index 2 on change while N or more "
        "requests are in flight (a bucket-boundary bug; 0 = none)",
    )
    parser.add_argument(
        "--stream-fault",
        default="",
        choices=("", "last-token"),
        help="last-token: a response not streamed renders its last token from the wrong position",
    )
    parser.add_argument("--no-metrics", action="store_true", help="no GET /metrics (no engine counters)")
    parser.add_argument("--serial", action="store_true", help="one request at a time; the others wait in the queue")
    parser.add_argument(
        "--burst-sampled",
        type=int,
        default=0,
        help="deliver the first N sampled requests' tokens in one burst (the client sees no stream beside them)",
    )
    parser.add_argument(
        "--stall-second-ms",
        type=float,
        default=0.0,
        help="hold the first token of a request started while another streams (a starved front end)",
    )
    args = parser.parse_args(argv)
    if args.fail_start:
        print("fake engine: cannot load model weights: file not found", file=sys.stderr, flush=True)
        sys.exit(3)

    async def serve() -> None:
        server = uvicorn.Server(uvicorn.Config(build_app(args), host=args.host, port=args.port, log_level="warning"))

        async def announce() -> None:
            while not server.started:
                await asyncio.sleep(0.01)
            print(f"STRATA_READY url=http://{args.host}:{args.port}", flush=True)

        task = asyncio.get_running_loop().create_task(announce())
        await server.serve()
        task.cancel()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
