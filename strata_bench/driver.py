"""Driver: one run of one scenario against one server, returned as the run's JSON dict.

Timeline (seconds of the scenario, divided by `time_scale` on the wall clock): streams are sent at the
start, asking for as many tokens as the server's context leaves (their `max_tokens` where it does not say),
so they decode however fast the engine is; the anchor is when every stream has its first token (or has
ended), plus `settle_s`; each joiner is sent `at_s` after the anchor; a stream is closed once `settle_s`
has passed after the last joiner's first token **and** it has its scenario `max_tokens` (the spec's work
on a slow engine, the whole join on a fast one); with `stream_tail_s` set, `stream_tail_s` after that
first token whatever their length. A run in which a stream stopped decoding before
that moment measured no join: its status is `missed`, with the reason (`missed_join`), and the report
leaves it out of the medians. The run ends early, marked failed, if the engine process exits or
`run_timeout_s` passes; whatever was measured until then stays in the dict. A scenario of agent sessions
(chains of dependent requests) is driven by sessions.py instead, with the same probes, feed and records.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from .engines.feed import fetch_events, next_index
from .engines.probe import ServerInfo, count_tokens, probe
from .engines.result import StreamResult
from .engines.stream import stream_completion
from .prompts import prompt_digest, prompt_seed, sized_text_prompt, token_prompt
from .run_verdicts import client_stall, missed_join, serialised
from .scenarios import RequestSpec, Scenario
from .sessions import SessionRun, SessionsDontFit, missed_session_join, session_fields


class RunFailed(RuntimeError):
    """The run could not complete (engine gone, timeout, scenario does not fit the server)."""


POLL_S = 0.1  # how often a run checks the engine process and its timeout; a late poll is a client stall


@dataclass(frozen=True)
class RunContext:
    run_id: str
    scenario: Scenario  # already scaled
    prompt_key: tuple[Any, ...]  # (nonce, round, scenario): the cold prompts' seed, shared by the round's arms
    time_scale: float = 1.0
    run_timeout_s: float = 3600.0


async def drive(url: str, ctx: RunContext, exit_code: Callable[[], int | None] = lambda: None) -> dict[str, Any]:
    """Run the scenario; never raises for a failed run (status 'failed' with the reason) except on cancel."""
    origin = time.perf_counter()
    run: dict[str, Any] = {"id": ctx.run_id, "time_scale": ctx.time_scale, "warnings": [], "engine_events": None}
    results: list[StreamResult] = []
    # Probes and the event feed are plain blocking calls, made before the clock starts and after it stops.
    info = probe(url)
    run["server"] = info.to_dict()
    run["prompt_mode"] = info.prompt_mode
    since = next_index(url) if info.family.events else None
    sessions: SessionRun | None = None
    stall: list[float] = []
    try:
        if ctx.scenario.sessions:
            sessions = SessionRun(url, ctx.scenario, info, ctx.prompt_key, ctx.run_id, ctx.time_scale, run["warnings"])
            results = sessions.results
            origin = time.perf_counter()
            await _race(sessions.run(), exit_code, ctx.run_timeout_s, stall)
        else:
            requests = _requests(url, ctx, info, run["warnings"])
            results = [
                StreamResult(
                    name=s.name,
                    role=s.role,
                    request_id=f"{ctx.run_id}-{s.name}",
                    prompt_tokens=length,
                    prompt_sha256=digest,
                    max_tokens=max_tokens,
                )
                for s, (_, digest, length, max_tokens) in zip(ctx.scenario.requests, requests)
            ]
            origin = time.perf_counter()
            scenario = _scenario(url, ctx, info, [r[0] for r in requests], results, run)
            await _race(scenario, exit_code, ctx.run_timeout_s, stall)
        run["status"], run["failure"] = ("errors" if any(r.error for r in results) else "ok"), None
        missed = missed_join(results)
        if run["status"] == "ok" and missed:
            run["status"], run["missed_join"] = "missed", missed
    except (RunFailed, SessionsDontFit) as exc:
        run["status"], run["failure"] = "failed", str(exc)
    if since is not None and exit_code() is None:
        fetched = fetch_events(url, since)
        run["engine_events"] = fetched[0] if fetched else None
    run["warnings"] += serialised(results)
    run["requests"] = [r.to_dict(origin) for r in results]
    if sessions is not None:
        session_fields(run["requests"], sessions.fields)
        missed = missed_session_join(run["requests"]) if run["status"] == "ok" else None
        if missed:
            run["status"], run["missed_join"] = "missed", missed
    run["anchor_at"] = None if run.get("anchor_at") is None else round(run["anchor_at"] - origin, 6)
    run["client_stall_s"] = round(stall[0], 3) if stall else 0.0
    run["warnings"] += client_stall(stall, origin)
    return run


async def _race(
    main: Any, exit_code: Callable[[], int | None], timeout_s: float, stall: list[float] | None = None
) -> None:
    """Run `main` until done; RunFailed if the engine exits first or the timeout passes. `stall` gets [seconds,
    perf_counter at]: the latest this loop (the client's: it sends and stamps every request) woke for its poll."""
    task = asyncio.ensure_future(main)
    deadline = time.monotonic() + timeout_s
    try:
        while not task.done():
            polled = time.perf_counter()
            await asyncio.wait([task], timeout=POLL_S)
            late = time.perf_counter() - polled - POLL_S
            if stall is not None and late > (stall[0] if stall else 0.0):
                stall[:] = [late, polled + POLL_S]
            if task.done():
                break
            code = exit_code()
            if code is not None:
                raise RunFailed(f"the engine exited with status {code} during the run")
            if time.monotonic() > deadline:
                raise RunFailed(f"the run did not finish within {timeout_s:g} s (--run-timeout)")
        task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _requests(url: str, ctx: RunContext, info: ServerInfo, warnings: list[str]) -> list[tuple[bytes, str, int, int]]:
    """Per request: the encoded body (built before the clock starts), the prompt's digest, its length in
    the server's tokens (exact for token ids, measured through the server's tokenizer for text) and
    max_tokens after fitting the server's context."""
    scenario, family = ctx.scenario, info.family
    if info.slots is not None and len(scenario.requests) > info.slots:
        warnings.append(
            f"scenario {scenario.name} sends {len(scenario.requests)} requests, the server has "
            f"{info.slots} slots: some wait for a slot"
        )
    out = []
    for spec in scenario.requests:
        seed = prompt_seed(*ctx.prompt_key, spec.name)
        if info.prompt_mode == "ids":
            prompt: list[int] | str = token_prompt(seed, spec.prompt_tokens, info.vocab_size or 2, info.eos_token_id)
            length: int | None = spec.prompt_tokens
        else:
            prompt, length = sized_text_prompt(seed, spec.prompt_tokens, lambda text: count_tokens(url, info, text))
            if length is None:
                warnings.append(
                    f"request {spec.name}: {info.family.label} cannot count tokens, so the text prompt is "
                    f"about {spec.prompt_tokens} words, not a measured {spec.prompt_tokens} tokens"
                )
        max_tokens = _fit(spec, length or spec.prompt_tokens, info, warnings, closed=bool(scenario.joiners))
        body = family.request_body(prompt, max_tokens, model=info.model)
        out.append(
            (
                json.dumps(body, separators=(",", ":")).encode(),
                prompt_digest(prompt),
                length or spec.prompt_tokens,
                max_tokens,
            )
        )
    return out


def _fit(spec: RequestSpec, prompt_tokens: int, info: ServerInfo, warnings: list[str], closed: bool = False) -> int:
    """max_tokens within the context; a stream the driver closes after the join (`closed`) asks for all the
    room there is, so it decodes until then on any engine."""
    if info.ctx is None:
        return spec.max_tokens
    if prompt_tokens >= info.ctx:
        raise RunFailed(
            f"request {spec.name}: a {prompt_tokens}-token prompt does not fit the server's context of "
            f"{info.ctx} tokens per request: lower --scale or raise the server's context"
        )
    room = info.ctx - prompt_tokens
    if closed and spec.role == "stream":
        return room
    if spec.max_tokens > room:
        warnings.append(f"request {spec.name}: max_tokens {spec.max_tokens} cut to {room} to fit the context")
    return min(spec.max_tokens, room)


async def _scenario(
    url: str, ctx: RunContext, info: ServerInfo, bodies: list[bytes], results: list[StreamResult], run: dict[str, Any]
) -> None:
    scenario, wall = ctx.scenario, 1.0 / ctx.time_scale
    first_token = {r.name: asyncio.Event() for r in results}
    # A stream's scenario length: the least it decodes (it asked for the context's room, see _fit).
    at_length = {r.name: asyncio.Event() for r in results}

    family = info.family

    def mark(result: StreamResult, length: int) -> Callable[[Any, float], None]:
        def on_event(_payload: Any, _arrived: float) -> None:
            if result.first_token_at is not None:
                first_token[result.name].set()
            if len(result.times) >= length:
                at_length[result.name].set()

        return on_event

    async def send(i: int, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        headers = family.headers(results[i].request_id)
        try:
            await stream_completion(
                url,
                bodies[i],
                results[i],
                path=family.endpoint,
                wire=family.wire,
                headers=headers,
                on_event=mark(results[i], scenario.requests[i].max_tokens),
            )
        finally:
            first_token[results[i].name].set()  # an ended request no longer holds anyone up

    stream_idx = [i for i, s in enumerate(scenario.requests) if s.role == "stream"]
    joiner_idx = [i for i, s in enumerate(scenario.requests) if s.role == "joiner"]
    streams = [asyncio.create_task(send(i, 0.0)) for i in stream_idx]
    joiners: list[asyncio.Task[None]] = []
    try:
        for i in stream_idx:
            await first_token[results[i].name].wait()
        if stream_idx:
            await asyncio.sleep(scenario.settle_s * wall)
        anchor = time.perf_counter()
        run["anchor_at"] = anchor
        joiners = [
            asyncio.create_task(send(i, scenario.requests[i].at_s * wall - (time.perf_counter() - anchor)))
            for i in joiner_idx
        ]
        for i in joiner_idx:
            await first_token[results[i].name].wait()
        if streams and joiners:
            tail = scenario.stream_tail_s if scenario.stream_tail_s is not None else scenario.settle_s
            await asyncio.sleep(tail * wall)
            if scenario.stream_tail_s is None:  # each stream also decodes its scenario length, then closes
                await asyncio.gather(
                    *(_close_at(task, at_length[results[i].name]) for i, task in zip(stream_idx, streams))
                )
            for task in streams:
                task.cancel()
        await asyncio.gather(*joiners, *streams, return_exceptions=True)
    finally:
        # Cancelled from outside (engine gone, timeout): close every open stream, keep what arrived.
        for task in (*streams, *joiners):
            task.cancel()
        await asyncio.gather(*streams, *joiners, return_exceptions=True)


async def _close_at(task: asyncio.Task[None], reached: asyncio.Event) -> None:
    """Cancel a stream once it has `reached` its length (at once if it has), unless it ended first."""
    waiter = asyncio.ensure_future(reached.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    task.cancel()
