"""The interleave check, run: A and B decode; C's long read joins them; D's long read gives way to E;
then every request again, alone, on a fresh engine.

This module drives the two phases and gathers evidence into an `InterleaveRun` (run.py);
`steps.py` turns that evidence into pass / fail / not exercised / not applicable. With `--url` both phases share the one server, so "solo" is alone but not fresh; every
request asks to skip the prefix cache where the server family has that switch (said in the report). A
server that runs one request at a time leaves the interleaving steps not exercised, with that reason, and
the gate does not wait for what cannot happen; that is concluded from facts only (the server's one slot, its
own running/waiting counters, or one stream that ended before the other began: concurrency.py), never
from how many tokens one stream got first. A failed request is a GateError naming it and its error.
"""

from __future__ import annotations

import secrets
import time

from strata_bench.engines.feed import EventWatcher
from strata_verify.client import Completion, EngineClient, GateError, StreamTask
from strata_verify.engine_proc import Target
from strata_verify.interleave.concurrency import ConcurrencyWatch, CounterReader
from strata_verify.interleave.run import InterleaveOptions, InterleaveRun, OneAtATime
from strata_verify.interleave.sampled import SAMPLED_ATTEMPTS, decoded_beside
from strata_verify.interleave.steps import judge
from strata_verify.requests import NAMES, SAMPLED, request_id


def run_interleave(target: Target, options: InterleaveOptions) -> InterleaveRun:
    """Both phases, then the verdict. GateError when an engine cannot be started or a request fails."""
    run = InterleaveRun(target=target, options=options, nonce=secrets.token_hex(4))
    with target.launch() as launch:
        try:
            _interleaved_phase(run, EngineClient(launch.url, options.request_timeout))
        except OneAtATime as exc:
            run.one_at_a_time = str(exc)
    if run.one_at_a_time is None:
        with target.launch() as launch:
            _solo_phase(run, EngineClient(launch.url, options.request_timeout))
    run.steps = judge(run)
    return run


def _check(task: StreamTask, what: str) -> Completion:
    result = task.result
    if result.error:
        raise GateError(f"interleave: request {result.name} ({what}) failed: {result.error}")
    return result


def _finish(task: StreamTask, timeout: float, what: str) -> Completion:
    """Wait for a request to end; GateError when it failed or did not end in time."""
    task.join(timeout)
    result = _check(task, what)
    if result.finish_reason is None:
        raise GateError(f"interleave: request {result.name} ({what}) did not finish in {timeout:.0f} s")
    return result


def _prepare(run: InterleaveRun, client: EngineClient) -> int:
    """Engine facts, prompts, and how many tokens A and B may decode; GateError when they cannot fit."""
    info = client.prepare()
    run.info = info
    run.cache = (
        f"every request asked to skip the prefix cache ({client.cold})"
        if client.cold
        else "Strata keeps no prefix cache"
        if client.family.events
        else f"{client.family.label}: no per-request switch for a prefix cache; solo runs may reuse one"
    )
    if client.server is not None and client.server.slots == 1:
        run.concurrency = [f"the server's own facts: one slot ({client.server.describe()})"]
        raise OneAtATime(
            f"the server has one slot (runs one request at a time; the server's own facts): {client.server.describe()}"
        )
    plan = run.options.plan
    vocab = info.get("vocab_size") or run.options.vocab_size
    if not vocab:
        raise GateError("interleave: the engine reports no vocab_size (GET /v1/engine); pass --vocab N")
    ctx = info.get("ctx")
    if ctx and plan.needed_ctx() > ctx:
        raise GateError(
            f"interleave: C's prompt ({plan.long_tokens} tokens) plus {plan.answer_tokens} answer tokens "
            f"does not fit the engine's context ({ctx}); lower --scale or give the engine a larger --ctx"
        )
    run.prompts = plan.prompts(int(vocab), info.get("eos_token_id"))
    longest_decoder = max(len(run.prompts["A"]), len(run.prompts["B"]))
    room = (ctx - longest_decoder - 1) if ctx else run.options.decode_cap
    return max(1, min(room, run.options.decode_cap))


def _interleaved_phase(run: InterleaveRun, client: EngineClient) -> None:
    opts, plan = run.options, run.options.plan
    decode_tokens = _prepare(run, client)
    ids = run.ids("interleave")
    run.watcher = EventWatcher(client.url)
    feed = client.family.events and "events" not in opts.lacks  # declared without: judged on the client's clock
    if feed:
        run.watcher.start()
    else:
        run.watcher.available = False  # no feed: the evidence is the client's clock
    run.t0 = time.perf_counter()
    tasks = {name: client.task(name, ids[name], run.prompts[name], decode_tokens) for name in ("A", "B")}
    watch = ConcurrencyWatch(CounterReader(client.url, client.family.name), run.rel, opts.serial_window)
    sampled: StreamTask | None = None
    try:
        for task in tasks.values():
            task.start()
        try:
            _wait_both_decoding(tasks["A"], tasks["B"], opts.phase_timeout, watch)
        finally:
            run.concurrency = watch.describe()
        # S: seeded sampling in decode batches beside A and B (the field's "interleaved == solo" at temperature > 0).
        # Beside them is judged on the client's clock (A and B got tokens during S): a loaded machine can deliver
        # the streams in bursts, so a draw not shown beside them is sent again before the step concludes.
        for attempt in range(SAMPLED_ATTEMPTS):
            run.sampled_attempts = attempt + 1
            sampled = client.task(
                SAMPLED,
                ids[SAMPLED] if attempt == 0 else f"{ids[SAMPLED]}-{attempt + 1}",
                run.prompts[SAMPLED],
                plan.sampled_tokens,
                sampling=opts.sampling,
            ).start()
            run.sampled["interleaved"] = _finish(sampled, opts.phase_timeout, "seeded sampling while A and B decode")
            if decoded_beside(run.sampled["interleaved"], tasks["A"].result, tasks["B"].result):
                break
        tasks["C"] = client.task("C", ids["C"], run.prompts["C"], plan.answer_tokens).start()
        _finish(tasks["C"], opts.phase_timeout, "long read while A and B decode")
        tasks["D"] = client.task("D", ids["D"], run.prompts["D"], plan.answer_tokens).start()
        # E must reach the server after D: E's thread could otherwise win the race to send (a server without
        # an event feed is judged on the client's clock, and E sent first is no give-way).
        while tasks["D"].result.sent_at is None and not tasks["D"].finished.wait(0.005):
            pass
        # E goes in while D is being read: as soon as the engine says D's read began. Without an
        # event feed E follows D at once, and if the engine ignored our ids, at D's first token at
        # the latest; the give-way step then fails as not exercised, for want of proof.
        deadline = time.perf_counter() + min(opts.phase_timeout, 120.0)
        while run.watcher.available and time.perf_counter() < deadline and not tasks["D"].first_token.is_set():
            if run.watcher.wait_for(
                lambda e: e.get("request_id") == ids["D"] and e.get("kind") in ("READ_START", "PIECE"), timeout=0.2
            ):
                break
        tasks["E"] = client.task("E", ids["E"], run.prompts["E"], plan.answer_tokens).start()
        for name in ("D", "E"):
            _finish(tasks[name], opts.phase_timeout, "D gives way to E")
        for name in ("A", "B"):
            _check(tasks[name], "decoding while C, D and E ran")
    finally:
        for name in ("A", "B"):
            tasks[name].cancel()
        if sampled is not None:
            sampled.cancel()
            sampled.join(30.0)
        for task in tasks.values():
            task.join(30.0)
        if feed:
            run.watcher.stop()
    run.interleaved = {name: task.result for name, task in tasks.items()}


def _wait_both_decoding(a: StreamTask, b: StreamTask, timeout: float, watch: ConcurrencyWatch) -> None:
    """Until A and B both have a token. OneAtATime only when `watch` proves it (counters, or a stream that ended
    before the other began); a failed request is a GateError with its error; a slow one is waited for."""
    deadline = time.perf_counter() + timeout
    while not (a.first_token.is_set() and b.first_token.is_set()):
        for task in (a, b):
            _check(task, "decoding before C")
        reason = watch.observe(a.result, b.result)
        if reason is not None:
            raise OneAtATime(reason)
        if time.perf_counter() > deadline:
            raise GateError(
                f"interleave: A or B got no token in {timeout:.0f} s (A {len(a.result.times)} tokens, "
                f"B {len(b.result.times)}); " + "; ".join(watch.describe())
            )
        (b if a.first_token.is_set() else a).first_token.wait(0.05)  # wait on the one without a token: no spin
    for task in (a, b):
        _check(task, "decoding before C")
    reason = watch.observe(a.result, b.result)  # both have a token: did one end before the other began?
    if reason is not None:
        raise OneAtATime(reason)


def _solo_phase(run: InterleaveRun, client: EngineClient) -> None:
    """Each request alone, one after another, with the number of tokens it got interleaved; then S alone twice
    (run 1, run 2), and S and E again not streamed (stream == non-stream)."""
    client.prepare()
    ids = run.ids("solo")
    for name in NAMES:
        tokens = len(run.interleaved[name].times) if name in ("A", "B") else run.options.plan.answer_tokens
        answer = client.complete(name, ids[name], run.prompts[name], max(1, tokens))
        if answer.error:
            raise GateError(f"interleave: solo run of {name} failed: {answer.error}")
        run.solo[name] = answer
    plan, sampling = run.options.plan, run.options.sampling
    for key, phase in (("solo", "solo"), ("solo again", "solo2")):
        answer = client.complete(
            SAMPLED, request_id(phase, SAMPLED, run.nonce), run.prompts[SAMPLED], plan.sampled_tokens, sampling=sampling
        )
        if answer.error:
            raise GateError(f"interleave: seeded request S ({key}) failed: {answer.error}")
        run.sampled[key] = answer
    for name, tokens, how in ((SAMPLED, plan.sampled_tokens, sampling), ("E", plan.answer_tokens, None)):
        answer = client.whole(name, request_id("whole", name, run.nonce), run.prompts[name], tokens, sampling=how)
        if answer.error:
            raise GateError(f"interleave: {name} not streamed failed: {answer.error}")
        run.whole[name] = answer
