"""The cache check's judgements beyond token equality: logprobs where the engine claims a cache hit has the cold
read's bits, the host store's restore path shown to run, and no prefix crossing a `cache_salt`.

- **bitwise**: GET /v1/engine `prompt_cache.bitwise` true (Strata: a cached answer has the cold answer's bits
  wherever `batch_invariant` holds). Every compared position's chosen-token logprob must then equal the
  cold read's exactly; a difference names the request, the token index, both values. Without the claim,
  a tolerance (`--logprob-tol`; on Strata by default `STRATA_LOGPROB_TOL`, 30x the largest difference its
  unmodified default layout showed, 3.5e-6, and far under the 0.019 nats of a hit that attends to one stale
  position) bounds the difference, and the report gives the margin; on another server without `--logprob-tol`
  the largest difference is information only.
- **store restore**: a CACHE_HIT event with source `store` for `r0.t1`, else the engine's own counter
  (`prompt_cache.store_hits` in /v1/engine) grown across the phase.
- **salts**: `x.other-salt` and `x.no-salt` must report `cached_tokens` 0 and have no CACHE_HIT; the
  control `x.same-salt` must be a hit, or isolation was not shown.
"""

from __future__ import annotations

from typing import Any

from strata_verify.cache.run import CacheRun, Turn
from strata_verify.diverge import logprob_delta
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Step

CHECK = "cache"
STRATA_LOGPROB_TOL = 1e-4
STORE, SALTS = "host store restore exercised", "no prefix crosses a cache_salt"


def bitwise_claimed(run: CacheRun, phase: str) -> bool:
    """The engine that served `phase` claims a cache hit is bitwise a cold read."""
    info = run.evict_cache_info if phase == "eviction" and run.evict_cache_info is not None else run.cache_info
    return isinstance(info, dict) and info.get("bitwise") is True


def logprob_tolerance(run: CacheRun) -> float | None:
    """The bound on |cached - cold| logprobs where no bitwise claim is made: --logprob-tol, else Strata's default."""
    if run.options.logprob_tol is not None:
        return run.options.logprob_tol
    return STRATA_LOGPROB_TOL if run.info.get("family") == "strata" else None


def logprob_lines(turns: list[Turn], claimed: bool, tol: float | None = None) -> tuple[str | None, list[str]]:
    """(a failure reason when the claim or the tolerance is broken, evidence lines) for turns whose token ids
    are equal."""
    worst: tuple[float, Turn, Any] | None = None
    for turn in turns:
        if turn.cold is None:
            continue
        delta = logprob_delta(turn.served, turn.cold)
        if not delta.compared:
            continue
        if claimed and not delta.bitwise_equal:
            i = delta.index
            return (
                f"request {turn.name}: logprob at token {i} differs from its cold read by {delta.largest:.3g} "
                f"(cached {turn.served.logprobs[i]!r}, cold {turn.cold.logprobs[i]!r}); the engine claims a cache "
                f"hit is bitwise a cold read (GET /v1/engine prompt_cache.bitwise)",
                [
                    f"request {turn.name} ({turn.served.request_id}): {delta.differing} of {delta.compared} logprobs "
                    f"not bitwise equal, largest |difference| {delta.largest:.3g} at token {i}; "
                    f"{turn.served.cached_prompt_tokens} prompt tokens cached"
                ],
            )
        if not claimed and tol is not None and delta.largest > tol:
            i = delta.index
            return (
                f"request {turn.name}: logprob at token {i} differs from its cold read by {delta.largest:.3g}, over "
                f"the tolerance {tol:g} (cached {turn.served.logprobs[i]!r}, cold {turn.cold.logprobs[i]!r})",
                [
                    f"request {turn.name} ({turn.served.request_id}): largest |difference| {delta.largest:.3g} at token "
                    f"{i}; {turn.served.cached_prompt_tokens} prompt tokens cached"
                ],
            )
        if worst is None or delta.largest > worst[0]:
            worst = (delta.largest, turn, delta)
    if worst is None:
        return None, ["logprobs: none returned, nothing compared"]
    largest, turn, delta = worst
    if claimed:
        how = "bitwise equal, as the engine claims (prompt_cache.bitwise)"
    elif tol is not None:
        margin = f"{tol / largest:.3g}x under it" if largest > 0 else "0 difference"
        how = f"within the tolerance {tol:g} (no bitwise claim for the cache): margin {margin}"
    else:
        how = "not required (the engine makes no bitwise claim for its cache; --logprob-tol bounds it)"
    return None, [f"logprobs: largest |difference| {largest:.3g} (request {turn.name}, token {delta.index}); {how}"]


def _hit_events(run: CacheRun, phase: str, turn: Turn) -> list[dict[str, Any]]:
    return [
        e
        for e in run.events.get(phase) or ()
        if e.get("kind") == "CACHE_HIT" and e.get("request_id") == turn.served.request_id
    ]


def store_step(run: CacheRun) -> Step:
    turns = {t.name: t for t in run.of("restore")}
    if "r0.t1" not in turns:
        return Step(
            CHECK,
            STORE,
            INFO,
            "not run: GET /v1/engine reports no host store (prompt_cache.store) or no slot count (batch)",
        )
    turn = turns["r0.t1"]
    pushers = len([t for t in turns.values() if t.session != "r0"])
    evidence = [
        f"r0.t0, then {pushers} cold requests one at a time (the engine has {run.info.get('batch')} slots), "
        f"then r0.t1: {len(turn.prompt)} prompt tokens, {turn.served.cached_prompt_tokens} cached"
    ]
    events = run.events.get("restore")
    hits = _hit_events(run, "restore", turn)
    evidence += [f"CACHE_HIT for r0.t1: {e.get('tokens')} tokens from {e.get('source')}" for e in hits]
    if events is not None:
        pushed = [e for e in events if e.get("kind") == "CACHE_EVICT"]
        evidence.append(
            "CACHE_EVICT in the phase: "
            + (
                ", ".join(
                    f"{e.get('source')} {e.get('tokens')} tokens to {e.get('to') or e.get('reason')}" for e in pushed
                )
                or "none"
            )
        )
        if any(e.get("source") == "store" for e in hits):
            return Step(
                CHECK,
                STORE,
                PASS,
                f"r0.t1 was restored from the host store ({hits[0].get('tokens')} tokens)",
                tuple(evidence),
            )
    before, after = run.store_counts or (None, None)
    if isinstance(before, dict) and isinstance(after, dict) and "store_hits" in after:
        grown = int(after.get("store_hits") or 0) - int(before.get("store_hits") or 0)
        evidence.append(
            f"GET /v1/engine prompt_cache.store_hits: {before.get('store_hits')} -> {after.get('store_hits')}"
        )
        if grown > 0 and events is None:
            return Step(
                CHECK,
                STORE,
                PASS,
                f"the engine counted {grown} store hit(s) in the phase (no event feed)",
                tuple(evidence),
            )
    why = (
        "r0.t1 was served from a slot, not the store"
        if any(e.get("source") == "slot" for e in hits)
        else "r0.t1 was not a cache hit: the store did not keep r0's prefix (too small for it?)"
    )
    return Step(CHECK, STORE, NOT_EXERCISED, why, tuple(evidence))


def _shared_within_salt(run: CacheRun, turn: Turn) -> int:
    """The longest prompt prefix `turn` shares with any other request of its own salt (unsalted with unsalted):
    a cache that keeps salts apart may serve that much (a first token in common with another session's)."""
    best = 0
    for other in run.turns.values():
        if other is turn or other.salt != turn.salt:
            continue
        same = 0
        for a, b in zip(turn.prompt, other.prompt):
            if a != b:
                break
            same += 1
        best = max(best, same)
    return best


def salts_step(run: CacheRun) -> Step:
    turns = {t.name: t for t in run.of("salts")}
    if not turns:
        return Step(CHECK, SALTS, INFO, "not run: the server takes no cache_salt (or reports no prompt cache)")
    events = run.events.get("salts")
    reports = any(t.served.cached_prompt_tokens is not None for t in turns.values())
    if not reports and events is None:
        return Step(
            CHECK,
            SALTS,
            NOT_EXERCISED,
            "the server reports no cached_tokens in usage and has no event feed: "
            "nothing shows what a salted request took from the cache",
        )
    evidence, crossed = [], []
    for name in ("x.holder", "x.other-salt", "x.no-salt", "x.same-salt"):
        turn = turns.get(name)
        if turn is None:
            continue
        hits = _hit_events(run, "salts", turn)
        cached = max([turn.served.cached_prompt_tokens or 0] + [int(e.get("tokens") or 0) for e in hits])
        evidence.append(
            f"{name}: salt {turn.salt or '(none)'}, {len(turn.prompt)} prompt tokens, {cached} cached"
            + (f" (CACHE_HIT from {hits[0].get('source')})" if hits else "")
        )
        own = _shared_within_salt(run, turn)  # what a cache may serve it from requests of its own salt
        if name in ("x.other-salt", "x.no-salt") and cached > own:
            crossed.append(
                f"request {name} (salt {turn.salt or 'none'}, {turn.served.request_id}) took {cached} "
                f"cached tokens where requests of its own salt share {own}: x.holder's prefix (salt a)"
            )
    if crossed:
        return Step(CHECK, SALTS, FAIL, "; ".join(crossed), tuple(evidence))
    control = turns.get("x.same-salt")
    if control is None or not (control.served.cached_prompt_tokens or _hit_events(run, "salts", control)):
        return Step(
            CHECK,
            SALTS,
            NOT_EXERCISED,
            "the holder's own salt got no hit (x.same-salt): the cache never "
            "held the prefix, so isolation was not shown",
            tuple(evidence),
        )
    return Step(CHECK, SALTS, PASS, "no cached token crossed a salt; the holder's own salt was a hit", tuple(evidence))
