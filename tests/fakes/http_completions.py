"""POST /v1/completions of the HTTP fake engine (fakes.http_engine), with the faults the gate must catch.

Contract: a prompt (token ids, or text as its bytes + 1) is admitted, read by the reader (fakes.http_state;
a cache hit reads only the rest), then answered with `max_tokens` tokens from fakes.answers, one SSE event
each every `--decode-ms` (or one JSON response with `stream: false`), then a usage chunk and [DONE]. The
`--*-fault` flags, `--salt`, `--logprob-jitter`, `--serial`, `--stall-second-ms`, `--burst-sampled` and
`--die-after` change exactly what fakes.http_engine's docstring says.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from strata_bench.synthetic.cache import answer_prompt

from .answers import logprobs_at, token_at
from .http_state import Fake, Job


def add_completions(app: FastAPI, args: argparse.Namespace, state: dict[str, Fake]) -> None:
    """Add the route to `app`; `state["fake"]` is the shared state, made when the app starts."""

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
            in_burst[0] = burst
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

        in_burst = [False]  # produce's: this answer goes out in one write

        async def stream():
            held = []  # a burst's token events, written together: no other stream's token lands between them
            async for event in produce():
                held.append(f"data: {json.dumps(event)}\n\n")
                if not (in_burst[0] and event["choices"]):
                    yield "".join(held)
                    held = []
            yield "".join(held) + "data: [DONE]\n\n"

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
