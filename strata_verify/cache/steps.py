"""The cache check, judged: a cached answer must equal the same request read cold, token for token, and each
scenario must be shown to have happened (else NOT_EXERCISED, which fails the gate).

Evidence: a hit is usage's `cached_tokens` > 0 or the engine's CACHE_HIT event for the request; an
eviction is a CACHE_EVICT event (only an event feed can show one); the give-way is a YIELDED event of the
long read to the session's turn, or, without a feed, the turn's first token before the long read's (the
client's clock, as the interleave check judges it). `--lacks give-way|events` makes the step that exists
to see that behaviour NOT_APPLICABLE; the equality steps count whatever is declared.
"""

from __future__ import annotations

from strata_bench.engines.compare import first_difference
from strata_verify.behaviours import apply_declaration
from strata_verify.cache.claims import bitwise_claimed, logprob_lines, logprob_tolerance, salts_step, store_step
from strata_verify.cache.run import CacheRun, Turn
from strata_verify.diverge import compare_answers
from strata_verify.interleave.steps import give_way_from_outside
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Step

CHECK = "cache"
HITS, EVICTION, GIVE_WAY = "later turns served from the cache", "eviction exercised", "give-way mid-session"
STEP_OF = {"events": EVICTION, "give-way": GIVE_WAY}


def judge(run: CacheRun) -> list[Step]:
    build = run.target.name if run.target.name != "engine" else None
    sessions = sorted({t.session for t in run.of("sessions")})
    tol = logprob_tolerance(run)
    steps = [_hits(run)]
    steps += [
        _equal(
            f"session {s}: cached == cold",
            [t for t in run.of("sessions") if t.session == s],
            bitwise_claimed(run, "sessions"),
            tol,
        )
        for s in sessions
    ]
    steps += [
        _eviction(run),
        _equal("under eviction: cached == cold", run.of("eviction"), bitwise_claimed(run, "eviction"), tol),
        _give_way(run),
        _equal("give-way: cached == cold", run.of("give-way"), bitwise_claimed(run, "give-way"), tol),
    ]
    steps += [store_step(run)]
    if run.of("restore"):
        steps.append(_equal("store restore: cached == cold", run.of("restore"), bitwise_claimed(run, "restore"), tol))
    steps += [salts_step(run)]
    if run.of("salts"):
        steps.append(_equal("salted: cached == cold", run.of("salts"), bitwise_claimed(run, "salts"), tol))
    steps.append(_cold_reads(run))
    return apply_declaration(
        [Step(CHECK, s.name, s.status, s.reason, s.evidence, build) for s in steps], run.options.lacks, STEP_OF
    )


def _hits(run: CacheRun) -> Step:
    """Every session turn after the first (and the give-way turn) was served with a hit."""
    later = [t for t in run.of("sessions") if t.turn > 0] + [
        t for t in run.of("give-way") if t.session == "g" and t.turn > 0
    ]
    evidence, missing = [], []
    for turn in later:
        hit = run.events.get(turn.phase)
        found = turn.hit(hit)
        if found is None:
            missing.append(turn.name)
            evidence.append(
                f"{turn.name}: {len(turn.prompt)} prompt tokens, no hit reported "
                f"(cached_tokens {turn.served.cached_prompt_tokens}, no CACHE_HIT event)"
            )
        else:
            evidence.append(f"{turn.name}: {found[0]} of {len(turn.prompt)} prompt tokens cached ({found[1]})")
    reports = any(t.served.cached_prompt_tokens is not None for t in later)
    if not later:
        return Step(CHECK, HITS, NOT_EXERCISED, "no later turn ran")
    if missing and not reports and not any(run.events.get(p) is not None for p in ("sessions", "give-way")):
        return Step(
            CHECK,
            HITS,
            NOT_EXERCISED,
            "the server reports no cached_tokens in usage and has no event "
            "feed: nothing shows a hit (vLLM: serve with --enable-prompt-tokens-details)",
            tuple(evidence),
        )
    if missing:
        return Step(
            CHECK,
            HITS,
            NOT_EXERCISED,
            f"{len(missing)} of {len(later)} later turns were not served from the "
            f"cache: {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}",
            tuple(evidence),
        )
    return Step(CHECK, HITS, PASS, f"all {len(later)} later turns were served with a cache hit", tuple(evidence))


def _equal(name: str, turns: list[Turn], bitwise: bool = False, tol: float | None = None) -> Step:
    """Every turn's served answer equals its cold read; a failure names the request and the first difference.
    Where the engine claims a hit is bitwise a cold read (`bitwise`), the logprobs must be equal too."""
    if not turns:
        return Step(CHECK, name, NOT_EXERCISED, "no request ran")
    tokens, evidence = 0, []
    for turn in turns:
        served, cold = turn.served, turn.cold
        if cold is None:
            return Step(CHECK, name, NOT_EXERCISED, f"request {turn.name} was not read cold")
        diff = compare_answers(left_name="cached", left=served, right_name="cold", right=cold)
        if diff is not None:
            hit = served.cached_prompt_tokens
            evidence += [
                f"request {turn.name} ({served.request_id}), {len(turn.prompt)} prompt tokens"
                + (f", {hit} of them cached" if hit is not None else "")
                + f": {diff.describe()}",
                f"cached tokens {diff.index}..: {served.token_ids[diff.index : diff.index + 8]}",
                f"cold tokens {diff.index}..: {cold.token_ids[diff.index : diff.index + 8]}",
            ]
            return Step(
                CHECK,
                name,
                FAIL,
                f"request {turn.name} differs from its cold read at token {diff.index} "
                f"(cached {_at(served.token_ids, diff.index)}, cold {_at(cold.token_ids, diff.index)})",
                tuple(evidence),
            )
        if not served.token_ids:
            return Step(CHECK, name, FAIL, f"request {turn.name}: no tokens to compare")
        if first_difference(served.token_ids, cold.token_ids) is None:
            tokens += len(served.token_ids)
    names = ", ".join(t.name for t in turns)
    broken, lines = logprob_lines(turns, bitwise, tol)
    if broken:
        return Step(CHECK, name, FAIL, broken, (names, *lines))
    return Step(
        CHECK,
        name,
        PASS,
        f"{len(turns)} requests, {tokens} tokens equal to their cold reads"
        + (", logprobs bitwise" if bitwise and not lines[0].startswith("logprobs: none") else ""),
        (names, *lines),
    )


def cache_label(info) -> str:
    """GET /v1/engine's prompt_cache in short: its settings, not its live counters."""
    if not isinstance(info, dict):
        return "not reported" if info is None else str(info)
    keys = ("mib", "tokens", "store", "min_tokens", "align", "bitwise")
    return ", ".join(f"{k} {info[k]}" for k in keys if k in info) or str(info)


def _at(tokens: list[int], index: int):
    return tokens[index] if 0 <= index < len(tokens) else "(none)"


def _eviction(run: CacheRun) -> Step:
    events = run.events.get("eviction")
    turns = run.of("eviction")
    sessions = len({t.session for t in turns})
    evidence = [
        f"{sessions} sessions side by side, {len(turns)} requests; engine's prompt cache: {cache_label(run.evict_cache_info or run.cache_info)}"
    ]
    if events is None:
        return Step(
            CHECK,
            EVICTION,
            NOT_EXERCISED,
            "the server has no event feed (GET /v1/events): an eviction cannot be shown from outside",
            tuple(evidence),
        )
    evicted = [e for e in events if e.get("kind") == "CACHE_EVICT"]
    hits = [e for e in events if e.get("kind") == "CACHE_HIT"]
    by_source = {
        s: sum(1 for e in hits if e.get("source") == s) for s in sorted({e.get("source") for e in hits}, key=str)
    }
    evidence.append(
        f"{len(evicted)} CACHE_EVICT, {len(hits)} CACHE_HIT events "
        f"({', '.join(f'{n} from {s}' for s, n in by_source.items()) or 'none'})"
    )
    if not evicted:
        return Step(
            CHECK,
            EVICTION,
            NOT_EXERCISED,
            "no CACHE_EVICT event: nothing was evicted (lower --evict-cache or raise --evict-sessions)",
            tuple(evidence),
        )
    return Step(
        CHECK, EVICTION, PASS, f"{len(evicted)} prefixes evicted while {sessions} sessions ran", tuple(evidence)
    )


def _give_way(run: CacheRun) -> Step:
    turns = {t.name: t for t in run.of("give-way")}
    long, turn = turns.get("long"), turns.get("g.t1")
    if long is None or turn is None:
        return Step(CHECK, GIVE_WAY, NOT_EXERCISED, "the give-way phase did not run")
    read, short = long.served, turn.served
    evidence = [
        f"long read: {len(long.prompt)} tokens, cold; g.t1: {len(turn.prompt)} tokens, "
        f"{short.cached_prompt_tokens if short.cached_prompt_tokens is not None else '?'} cached"
    ]
    events = run.events.get("give-way")
    if events is None:
        return give_way_from_outside(CHECK, GIVE_WAY, read, short, run.rel, evidence)
    yields = [
        e for e in events if e.get("kind") == "YIELDED" and read.request_id in (e.get("request_id"), e.get("parked"))
    ]
    for y in yields:
        evidence.append(f"YIELDED {y.get('slot')} {y.get('tokens_read')} (to {y.get('to', '?')})")
    if run.give_way_attempts > 1:
        evidence.append(
            f"attempt {run.give_way_attempts}: in the earlier one(s) the long read went to its end (g.t1 reached "
            "the engine too late to take over), so a fresh long read was sent"
        )
    evidence.append(
        f"long sent {run.rel(read.sent_at)}, first token {run.rel(read.first_token_at)}; g.t1 sent "
        f"{run.rel(short.sent_at)}, first token {run.rel(short.first_token_at)}"
    )
    if not yields:
        return Step(
            CHECK,
            GIVE_WAY,
            NOT_EXERCISED,
            "the long read went to its end without giving way (no YIELDED event for it)",
            tuple(evidence),
        )
    if not any(y.get("to") in (None, short.request_id) for y in yields):
        return Step(
            CHECK,
            GIVE_WAY,
            NOT_EXERCISED,
            f"the long read gave way to {yields[0].get('to')}, not to g.t1",
            tuple(evidence),
        )
    return Step(
        CHECK,
        GIVE_WAY,
        PASS,
        f"the long read gave way at {yields[0].get('tokens_read')} tokens to the session's cached turn",
        tuple(evidence),
    )


def _cold_reads(run: CacheRun) -> Step:
    """The reference must be cold: a cold read that says it was served from the cache proves nothing."""
    name = "cold reads were cold"
    warm = [
        (t.name, t.cold.cached_prompt_tokens)
        for t in run.turns.values()
        if t.cold is not None and t.cold.cached_prompt_tokens
    ]
    how = run.cold_how or "no switch"
    if warm:
        return Step(
            CHECK,
            name,
            FAIL,
            f"{len(warm)} cold reads report cached tokens ({how}): " + ", ".join(f"{n} {c}" for n, c in warm[:6]),
            (),
        )
    reported = sum(1 for t in run.turns.values() if t.cold is not None and t.cold.cached_prompt_tokens is not None)
    return Step(
        CHECK,
        name,
        INFO,
        f"{how}; {reported} of {len(run.turns)} cold reads report cached_tokens 0"
        if reported
        else f"{how}; the server reports no cached_tokens",
    )
