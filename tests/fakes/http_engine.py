"""The HTTP fake engine: a server that follows docs/API.md, for fast tests of the gate's logic (no model).

Tokens are a hash of (prompt, position), so greedy answers are deterministic whatever runs beside
them. Reads take `--read-ms-per-token`, go in `--piece`-token pieces (0 = one run), and decoding
pauses while a piece is read, as in strata-engine; at a piece's end a waiting prompt under half as
long takes over (YIELDED) unless `--no-yield`. Events go to GET /v1/events and, as log lines, stderr.
`--prompt-cache MIB` keeps finished prompts (strata_bench.synthetic.cache: `--cache-tokens-per-mib` tokens a
MiB, `cache_salt` honoured): a request reads only what is not cached, says `cached_tokens` in its usage, and
CACHE_HIT / CACHE_EVICT events name hits and evictions; `--cache-fault one-too-far` plays a cache that claims
one token more than it matched (the answer is computed without that prompt token), `--cache-fault salt-leak` one
that ignores `cache_salt` (one salt's prefix served to another), `store-restore` a restore from the store that
loses its last position, `logprob-shift` a hit whose logprobs move by 0.019 while its tokens stay. GET /metrics
gives the engine's counters (`strata_requests_running`, `strata_queue_length`) unless `--no-metrics`; `--serial`
runs one request at a time (the others wait in the queue); `--stall-second-ms N` holds the first token of a
request that starts while another streams by N ms (a starved HTTP front end: the engine runs both, the client
sees one). `temperature` > 0 samples: tokens hash the seed too (a fresh one per request without `seed`), and
every third sampled position reports a runner-up above the chosen token; `stream: false` returns one JSON
response. `--sample-fault batch` mixes the requests running beside a draw into it, `--sample-fault advance` one
engine-wide generator's state (the same seed draws differently each request), `--sample-fault greedy` ignores
temperature; `--burst-sampled N` delivers the first N sampled requests' tokens in one burst; `--stream-fault
last-token` renders a whole response's last token from the next position; `--batch-fault N` changes greedy
tokens from index 2 on while N or more requests are in flight (a bucket-boundary bug).

This module is the app and its start (the info routes, `STRATA_READY` on stdout once serving); its parts are
fakes.answers (the tokens), fakes.http_state (events, counters, the reader), fakes.http_completions (the
completion route and its faults) and fakes.http_flags (the command line). Run it as a script:

    python tests/fakes/http_engine.py --piece 512 --host 127.0.0.1 --port 8123
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the package's modules import as `fakes.*` from tests/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from fakes import http_flags
from fakes.http_completions import add_completions
from fakes.http_state import Fake


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

    add_completions(app, args, state)
    return app


def main(argv: list[str] | None = None) -> None:
    args = http_flags.parse(argv, __doc__.splitlines()[0])
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
