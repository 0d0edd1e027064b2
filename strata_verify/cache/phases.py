"""Two more cache phases, both one request at a time (so their evidence does not depend on timing or load):

- **restore**: session `r0`'s first turn, then as many cold first turns of other sessions as the engine has
  slots plus one (each takes the least recently used slot, so `r0`'s prefix is pushed out to the host store),
  each with a first token neither `r0` nor another of them has (random ids share one by chance, 1 in the
  vocabulary each: a cache that matches single tokens would then serve `r0`'s slot and keep it), then `r0`'s
  second turn: it can only be served by a restore from the store. Run where GET /v1/engine's
  `prompt_cache` says there is a store and `batch` says how many slots.
- **salts**: a holder reads a prompt no one else has under salt `a`; then the same prompt plus a tool
  result under salt `b`, and with no salt: a cache that keeps salts apart serves neither (cached_tokens 0,
  no CACHE_HIT); then the holder's own salt again, the control, which must be a hit (else nothing was
  shown). Run where the server takes the family's salt field (vLLM's `cache_salt`; Strata's where it
  reports a prompt cache).

check.py calls these on the cache-on engine; every request is read cold afterwards with the others.
"""

from __future__ import annotations

import uuid
from typing import Callable

import httpx

from strata_verify.cache.plan import Prompts
from strata_verify.cache.run import CacheRun, Turn
from strata_verify.client import EngineClient

APART_TRIES = 64  # fresh draws for a cold prompt whose first token is taken (a vocabulary too small: the last)
SALT_TURNS = (("x.holder", "a", 0), ("x.other-salt", "b", 1), ("x.no-salt", None, 2), ("x.same-salt", "a", 1))


def engine_cache(client: EngineClient) -> dict | None:
    """GET /v1/engine's prompt_cache now (its live counters: store_hits), or None."""
    try:
        data = httpx.get(f"{client.url}/v1/engine", timeout=10.0).json()
    except (httpx.HTTPError, ValueError):
        return None
    cache = data.get("prompt_cache") if isinstance(data, dict) else None
    return cache if isinstance(cache, dict) else None


def store_slots(run: CacheRun) -> int | None:
    """Slots to push through when the engine says it has a host store; None when it does not say so."""
    cache, batch = run.cache_info, run.info.get("batch")
    if isinstance(cache, dict) and cache.get("store") and isinstance(batch, int) and batch > 0:
        return batch
    return None


def apart(prompts: Prompts, what: str, length: int, taken: set[int]) -> list[int]:
    """A seeded prompt whose first token is not in `taken` (so it shares no prefix with those prompts)."""
    prompt = prompts.piece(what, length)
    for attempt in range(1, APART_TRIES):
        if prompt[0] not in taken:
            break
        prompt = prompts.piece(f"{what}#{attempt}", length)
    return prompt


def restore(run: CacheRun, client: EngineClient, task: Callable, done: Callable) -> None:
    """r0.t0; then slots + 1 cold first turns one at a time; then r0.t1, which only the store can serve."""
    slots = store_slots(run)
    if slots is None:
        return
    plan, prompts = run.options.plan, run.prompts
    before = engine_cache(client)
    first = prompts.first_turn(plan, "r0")
    r0 = task(run, client, "r0.t0", first)
    run.add(Turn("r0.t0", "restore", "r0", 0, first, r0.result))
    r0.run()
    done(r0, "the restore session's first turn")
    taken = {first[0]}
    for i in range(1, slots + 2):
        prompt = apart(prompts, f"r{i}-alone", plan.turn_tokens(0), taken)  # shares not one token with r0 or the others
        taken.add(prompt[0])
        other = task(run, client, f"r{i}.t0", prompt)
        run.add(Turn(f"r{i}.t0", "restore", f"r{i}", 0, prompt, other.result))
        other.run()
        done(other, f"a request that pushes r0 out of its slot ({i} of {slots + 1})")
    second = prompts.next_turn(plan, "r0", 1, first, r0.result.token_ids)
    r1 = task(run, client, "r0.t1", second)
    run.add(Turn("r0.t1", "restore", "r0", 1, second, r1.result))
    r1.run()
    done(r1, "the turn only the host store can serve")
    run.store_counts = (before, engine_cache(client))


def salts(run: CacheRun, client: EngineClient, task: Callable, done: Callable) -> None:
    """A holder under salt a; the same prefix under salt b and unsalted (no hit allowed); salt a again (a hit)."""
    field = client.family.cold_salt if run.salt_field_ok else None
    if field is None:
        return
    plan, prompts = run.options.plan, run.prompts
    values = {"a": uuid.uuid4().hex, "b": uuid.uuid4().hex}
    held = prompts.piece("salt-holder", plan.turn_tokens(0))  # no other request has this prefix
    for name, salt, tool in SALT_TURNS:
        prompt = held if tool == 0 else held + prompts.piece(f"salt-tool{tool}", plan.tool_tokens)
        t = task(run, client, name, prompt)
        if salt is not None:
            t.body[field] = values[salt]
        run.add(Turn(name, "salts", "x", tool, prompt, t.result, salt=salt))
        t.run()
        done(t, f"a salted request ({name})")
