"""The cache check, run: agent sessions whose later turns a prompt cache serves, sessions enough to evict,
and a session turn that a long cold read gives way to; then every request again, read cold.

Engines: with `--engine` on Strata, the sessions and the give-way run on the engine as given, the eviction
sessions on a fresh one with a small `--prompt-cache` (so its host store must evict), and the cold reads on
a fresh one with `--prompt-cache 0`. On a URL, or an engine of another family (vLLM), everything runs on
the one server and each cold read carries the family's switch (a fresh `cache_salt`, llama.cpp's
`cache_prompt: false`); a server with no switch cannot be checked this way (GateError, exit 2).
`steps.py` judges what this module gathers (`CacheRun`, run.py).
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid

from strata_bench.engines.families import STRATA
from strata_bench.engines.feed import EventWatcher
from strata_verify.cache import phases
from strata_verify.cache.plan import CacheOptions, Prompts
from strata_verify.cache.run import CacheRun, Turn
from strata_verify.cache.steps import judge
from strata_verify.client import EngineClient, GateError, StreamTask
from strata_verify.engine_proc import Target

GIVE_WAY_ATTEMPTS = 3  # long reads at most, while the read keeps going to its end without giving way
COLD_SALT = "cache_salt"  # Strata's per-request switch (vLLM's semantics), where /v1/engine reports a cache


def run_cache(target: Target, options: CacheOptions) -> CacheRun:
    """Every phase, then the verdict. GateError when an engine cannot run or a request fails."""
    run = CacheRun(target=target, options=options, nonce=secrets.token_hex(4))
    separate = False
    with target.launch() as launch:
        client = _client(run, launch.url)
        separate = target.fresh and client.family is STRATA
        _sessions(run, client, "sessions", options.plan.sessions, options.plan.turns)
        _give_way(run, client)
        for phase, runner in (("restore", phases.restore), ("salts", phases.salts)):
            watcher = _watch(run, client)
            try:
                runner(run, client, _task, _done)
            finally:
                _stop(run, phase, watcher)
        if not separate:
            _sessions(run, client, "eviction", options.plan.evict_sessions, options.plan.evict_turns)
            _cold(run, client)
    if separate:
        with _with_flag(target, f"--prompt-cache {options.evict_mib:g}").launch() as launch:
            client = _client(run, launch.url)
            run.evict_cache_info = client.info().get("prompt_cache")
            _sessions(run, client, "eviction", options.plan.evict_sessions, options.plan.evict_turns)
        with _with_flag(target, "--prompt-cache 0").launch() as launch:
            _cold(run, _client(run, launch.url))
        run.cold_how = f"on a fresh engine started with --prompt-cache 0; eviction on one with --prompt-cache {options.evict_mib:g}"
    run.steps = judge(run)
    return run


def _with_flag(target: Target, flag: str) -> Target:
    return Target(name=target.name, command=f"{target.command} {flag}", start_timeout=target.start_timeout)


def _client(run: CacheRun, url: str) -> EngineClient:
    """Probe the server; the first probe also fixes the prompts and says how a cold read is made."""
    client = EngineClient(url, run.options.request_timeout)
    info = client.prepare()
    if run.prompts is not None:
        return client
    run.info = info
    vocab = info.get("vocab_size") or run.options.vocab_size
    if not vocab or not client.server.supports_token_ids:
        raise GateError(
            f"cache: the check sends token-id prompts (an agent's context is repeated token for token); "
            f"{client.server.describe()} takes none or says no vocabulary: pass --vocab N where it takes ids"
        )
    ctx, plan = info.get("ctx"), run.options.plan
    if ctx and plan.needed_ctx() > ctx:
        raise GateError(
            f"cache: the longest request ({plan.needed_ctx()} tokens with its answer) does not fit the "
            f"engine's context ({ctx}); lower --scale or --turns"
        )
    run.prompts = Prompts(run.nonce, int(vocab), info.get("eos_token_id"))
    run.feed = client.family.events and "events" not in run.options.lacks
    if client.family is STRATA:
        run.salt = COLD_SALT if info.get("prompt_cache") else None
        run.cold_how = f"each cold read with a fresh {COLD_SALT}" if run.salt else ""
        run.salt_field_ok = run.salt is not None
    else:
        run.cold_how = f"each cold read with {client.cold}" if client.cold else ""
        run.salt_field_ok = client.family.cold_salt is not None
    run.cache_info = info.get("prompt_cache")
    return client


def _task(
    run: CacheRun, client: EngineClient, name: str, prompt: list[int], cold: bool = False, attempt: int = 0
) -> StreamTask:
    rid = run.request_id(name, cold) + (f"-{attempt + 1}" if attempt else "")
    task = client.task(name, rid, prompt, run.options.plan.answer_tokens, cold=cold)
    if cold and run.salt:
        task.body[run.salt] = uuid.uuid4().hex
    return task


def _done(task: StreamTask, what: str) -> None:
    result = task.result
    if result.error or result.finish_reason is None:
        why = result.error or "it did not finish"
        raise GateError(f"cache: request {result.name} ({what}) failed: {why}")


def _watch(run: CacheRun, client: EngineClient) -> EventWatcher:
    watcher = EventWatcher(client.url)
    if run.feed:
        watcher.start()
    else:
        watcher.available = False
    return watcher


def _stop(run: CacheRun, phase: str, watcher: EventWatcher) -> None:
    if run.feed:
        watcher.stop()
    run.events[phase] = list(watcher.events) if watcher.available else None


def _sessions(run: CacheRun, client: EngineClient, phase: str, sessions: int, turns: int) -> None:
    """Sessions side by side, each in its own thread, turn after turn: an agent waits for its answer."""
    plan, prompts = run.options.plan, run.prompts
    prefix = "s" if phase == "sessions" else "e"
    watcher = _watch(run, client)
    errors: list[GateError] = []

    def session(name: str) -> None:
        prompt = prompts.first_turn(plan, name)
        for turn in range(turns):
            task = _task(run, client, f"{name}.t{turn}", prompt)
            run.add(Turn(task.result.name, phase, name, turn, prompt, task.result))
            task.run()
            try:
                _done(task, f"turn {turn} of session {name}")
            except GateError as exc:
                errors.append(exc)
                return
            if turn + 1 < turns:
                prompt = prompts.next_turn(plan, name, turn + 1, prompt, task.result.token_ids)

    threads = [threading.Thread(target=session, args=(f"{prefix}{i}",), daemon=True) for i in range(sessions)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(run.options.phase_timeout)
    finally:
        _stop(run, phase, watcher)
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise GateError(f"cache: the {phase} phase did not finish in {run.options.phase_timeout:.0f} s")


def _give_way(run: CacheRun, client: EngineClient) -> None:
    """Session g's first turn; then a long cold read L; as soon as L's read is under way, g's next turn,
    whose prompt is under half of L's and mostly cached, so it may take over at L's next boundary."""
    plan, prompts, timeout = run.options.plan, run.prompts, run.options.phase_timeout
    watcher = _watch(run, client)
    try:
        first = prompts.first_turn(plan, "g")
        g0 = _task(run, client, "g.t0", first)
        run.add(Turn("g.t0", "give-way", "g", 0, first, g0.result))
        g0.run()
        _done(g0, "give-way session's first turn")
        second = prompts.next_turn(plan, "g", 1, first, g0.result.token_ids)
        for attempt in range(GIVE_WAY_ATTEMPTS):
            run.give_way_attempts = attempt + 1
            read, g1 = _long_read_then_turn(run, client, watcher, second, attempt, timeout)
            # A turn that reached the engine after the long read's last boundary (its last piece under way, or
            # the read ended) found nothing to take over: a fact of this machine's timing, not of the engine.
            # The client cannot see when the turn reached the engine, so any long read that did not give way
            # runs again with a fresh one; only when every attempt went to its end is give-way not exercised.
            if not _came_too_late(read.result, g1.result) and not _went_to_its_end(watcher, read.result):
                break
    finally:
        _stop(run, "give-way", watcher)


def _long_read_then_turn(run: CacheRun, client: EngineClient, watcher, second: list[int], attempt: int, timeout: float):
    """A cold long read; as soon as it is under way (its events say so where the engine has them), g's next turn."""
    plan, prompts = run.options.plan, run.prompts
    long_prompt = prompts.piece("long-read" if attempt == 0 else f"long-read.{attempt}", plan.long_tokens)
    read = _task(run, client, "long", long_prompt, attempt=attempt)
    run.add(Turn("long", "give-way", "long", 0, long_prompt, read.result))
    run.t0 = time.perf_counter()
    read.start()
    # The turn must reach the server after the long read: its thread may win the race to send otherwise.
    while read.result.sent_at is None and not read.finished.wait(0.005):
        pass
    time.sleep(0.05)
    rid = read.result.request_id
    deadline = time.perf_counter() + min(timeout, 120.0)
    while watcher.available and time.perf_counter() < deadline and not read.first_token.is_set():
        if watcher.wait_for(
            lambda e: e.get("request_id") == rid and e.get("kind") in ("READ_START", "PIECE"), timeout=0.2
        ):
            break
    g1 = _task(run, client, "g.t1", second, attempt=attempt)
    run.add(Turn("g.t1", "give-way", "g", 1, second, g1.result))
    g1.start()
    for task, what in ((read, "the long read"), (g1, "the turn that should take over")):
        task.join(timeout)
        _done(task, what)
    return read, g1


def _went_to_its_end(watcher, read) -> bool:
    """The engine's events show no give-way by the long read (False where there is no event feed to tell)."""
    if not watcher.available:
        return False
    yielded = watcher.wait_for(
        lambda e: e.get("kind") == "YIELDED" and read.request_id in (e.get("request_id"), e.get("parked")), timeout=1.0
    )
    return yielded is None


def _came_too_late(read, turn) -> bool:
    """The turn was sent after the long read's first token: the read had ended before the turn arrived."""
    return None not in (read.first_token_at, turn.sent_at) and turn.sent_at >= read.first_token_at


def _cold(run: CacheRun, client: EngineClient) -> None:
    """Every request again, one at a time, read cold."""
    if run.target.fresh and client.family is STRATA:
        pass  # this engine was started with --prompt-cache 0
    elif not run.cold_how:
        raise GateError(
            f"cache: {client.server.describe()} has no per-request switch to skip its prefix cache, so "
            "the cold reads cannot be made on it (Strata: give --engine, the cold reads then go to a "
            "fresh engine with --prompt-cache 0)"
        )
    for turn in run.turns.values():
        task = _task(run, client, turn.name, turn.prompt, cold=True)
        task.run()
        _done(task, "its cold read")
        turn.cold = task.result
