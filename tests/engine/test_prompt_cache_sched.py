"""The prompt cache in the scheduler, over the simulated executor on a fake clock (milliseconds of wall time):
hits from slots and the host store, evictions, namespaces, cancels, give-way on the uncached rest, and a
store that runs out of memory. The simulator checks every read starts where the slot's KV ends."""

from __future__ import annotations

import pytest

from fakes.scheduler import PIPED, Harness
from strata_engine.scheduler.request import Phase, Request
from strata_engine.scheduler.scheduler import Scheduler

CONTEXT = [(7 + 31 * i) % 997 for i in range(4000)]


class CachingHarness(Harness):
    """The harness's scheduler straight over the simulator, which copies prefixes (the recorder does not)."""

    def __init__(self, **config):
        super().__init__(**{"prompt_cache_mib": 1024, **config})  # 10,000 tokens at the sim's 96 KiB a token
        self.executor = self.sim
        self.scheduler = Scheduler(self.config, self.sim, clock=self.clock, sink=self.sink, events=self.events)

    def submit(
        self, request_id: str, prompt: list[int], max_tokens: int = 64, salt: str | None = None, at: float | None = None
    ) -> Request:
        request = Request(request_id, list(prompt), max_tokens, cache_salt=salt)
        self.requests[request_id] = request
        if at is None:
            self.scheduler.add(request)
        else:
            self.clock.at(at, lambda: self.scheduler.add(request))
        return request

    def turn(self, request_id: str, previous: Request, new_tokens: int = 64, **kw) -> Request:
        tool = [(request_id.__hash__() % 7 + 3 * i) % 997 for i in range(new_tokens)]
        return self.submit(request_id, previous.prompt_ids + previous.output_ids + tool, **kw)

    def fields(self, kind: str) -> list[dict]:
        return [{"request": e.request_id, "slot": e.slot, **e.fields} for e in self.events.of_kind(kind)]


def test_an_agents_next_turn_reads_only_what_is_new():
    h = CachingHarness(batch=2, prefill_chunk=512, ctx=16384)
    first = h.submit("turn1", CONTEXT)
    h.run()
    second = h.turn("turn2", first)
    h.run()
    assert (
        second.cached_tokens == 4063 and second.phase is Phase.FINISHED
    )  # the sim claims no invariance: all fed tokens
    assert h.fields("CACHE_HIT") == [
        {"request": "turn2", "slot": first.slot, "tokens": 4063, "source": "slot", "prompt_tokens": 4128}
    ]
    assert h.scheduler.stats()["prompt_cache"]["slot_hits"] == 1


def test_with_the_cache_off_every_turn_is_read_cold():
    h = CachingHarness(batch=2, prefill_chunk=512, ctx=16384, prompt_cache_mib=0)
    first = h.submit("turn1", CONTEXT)
    h.run()
    second = h.turn("turn2", first)
    h.run()
    assert second.cached_tokens == 0 and not h.fields("CACHE_HIT")
    assert h.scheduler.stats()["prompt_cache"] == {
        "mib": 0,
        "slot_reuse": False,
        "store": False,
        "hits": 0,
        "evictions": 0,
        "store_bytes": 0,
    }


def test_a_prefix_pushed_out_of_its_slot_comes_back_from_the_store():
    h = CachingHarness(batch=1, prefill_chunk=512, ctx=16384)
    a1 = h.submit("a1", CONTEXT)
    h.run()
    h.submit("b1", [3] * 2000)  # another agent takes the only slot: a1's prefix goes to the store
    h.run()
    a2 = h.turn("a2", a1)
    h.run()
    evicts = h.fields("CACHE_EVICT")
    assert [(e["source"], e["tokens"], e["to"]) for e in evicts] == [("slot", 4063, "store"), ("slot", 2063, "store")]
    assert evicts[0]["bytes"] == 4063 * h.sim.kv_bytes_per_token
    assert a2.cached_tokens == 4063 and h.fields("CACHE_HIT")[0]["source"] == "store"
    assert h.scheduler.stats()["prompt_cache"]["store_entries"] == 2


def test_under_its_cap_the_store_evicts_least_recently_used_first():
    per_token = 98304
    h = CachingHarness(batch=1, prefill_chunk=512, ctx=16384, prompt_cache_mib=(5000 * per_token) >> 20)  # one context
    firsts = [h.submit(f"agent{i}", [i] + CONTEXT[1:]) for i in range(3)]
    h.run()
    evicts = [e for e in h.fields("CACHE_EVICT") if e["source"] == "store"]
    assert [(e["reason"], e["tokens"]) for e in evicts] == [("lru", 4063)]  # agent0 out for agent1
    h.turn("agent0-again", firsts[0])
    h.run()
    assert h.requests["agent0-again"].cached_tokens == 0  # evicted: read cold, and nothing failed
    assert all(r.finish_reason == "length" for r in h.requests.values())


def test_a_cache_salt_keeps_namespaces_apart():
    h = CachingHarness(batch=2, prefill_chunk=512, ctx=16384)
    first = h.submit("turn1", CONTEXT, salt="agent-1")
    h.run()
    other = h.turn("other", first, salt="agent-2")
    unsalted = h.turn("unsalted", first)
    h.run()
    own = h.turn("own", first, salt="agent-1")
    h.run()
    assert (other.cached_tokens, unsalted.cached_tokens, own.cached_tokens) == (0, 0, 4063)


def test_a_cancelled_read_leaves_only_what_it_completely_read():
    h = CachingHarness(**{**PIPED, "piped_read_piece": 1024})
    long = h.submit("long", CONTEXT * 2, max_tokens=4)
    h.cancel_at(0.4, "long")  # mid-read: pieces of 1,024 tokens, each ~0.2 s here
    h.run()
    stop = h.fields("BSTOP")[0]
    assert long.finish_reason == "cancelled" and 0 < stop["tokens_read"] < 8000
    again = h.submit("again", CONTEXT * 2, max_tokens=4)
    h.run()
    assert again.cached_tokens == stop["tokens_read"] and again.finish_reason == "length"
    assert again.output_ids == h.solo_tokens("again", 4)


def test_give_way_works_on_the_uncached_rest():
    h = CachingHarness(**{**PIPED, "piped_read_piece": 1024})
    first = h.submit("turn1", CONTEXT, max_tokens=8)
    h.run()
    second = h.turn("turn2", first, new_tokens=8000, max_tokens=8)
    short = h.submit("short", [5] * 100, max_tokens=8, at=h.clock.now + 0.3)
    h.run()
    yielded = h.fields("YIELDED")
    assert second.cached_tokens == 4007 and [e["request"] for e in yielded] == ["turn2"]
    assert yielded[0]["tokens_read"] > second.cached_tokens and yielded[0]["to"] == "short"
    assert second.output_ids == h.solo_tokens("turn2", 8) and short.finish_reason == "length"


def test_a_store_that_runs_out_of_memory_gives_way_and_no_request_fails():
    h = CachingHarness(batch=1, prefill_chunk=512, ctx=16384)

    def no_memory(key, slot, tokens, first=0):
        raise MemoryError("the host is out of memory")

    h.sim.save_prefix = no_memory
    for i in range(3):
        h.submit(f"agent{i}", [i] + CONTEXT[1:], max_tokens=4)
    with pytest.warns(RuntimeWarning, match="out of memory"):
        h.run()
    assert all(r.finish_reason == "length" for r in h.requests.values())
    assert [e["to"] for e in h.fields("CACHE_EVICT") if e["source"] == "slot"] == ["dropped", "dropped"]
    assert h.scheduler.stats()["prompt_cache"]["store_entries"] == 0


@pytest.mark.parametrize("cache_mib", [1024, 0], ids=["cache on", "cache off"])
def test_a_mostly_cached_turn_takes_over_a_cold_read_as_a_short_prompt_would(cache_mib):
    """Give-way counts the tokens each side reads: an agent's next turn (4,072 tokens, 4,063 of them cached)
    is short beside a 6,000-token cold read; with the cache off it is not (the spec's rule, whole prompts)."""
    h = CachingHarness(**{**PIPED, "piped_read_piece": 1024, "prompt_cache_mib": cache_mib})
    first = h.submit("turn1", CONTEXT, max_tokens=8)
    h.run()
    cold = h.submit("cold", [(3 + 17 * i) % 997 for i in range(6000)], max_tokens=8)
    second = h.turn("turn2", first, max_tokens=8, at=h.clock.now + 0.3)
    h.run()
    yielded = [(e["request"], e["to"]) for e in h.fields("YIELDED")]
    assert yielded == ([("cold", "turn2")] if cache_mib else []), yielded
    assert second.output_ids == h.solo_tokens("turn2", 8) and cold.output_ids == h.solo_tokens("cold", 8)


def test_a_read_done_stores_the_window_before_its_last_whole_chunk_where_slots_trim_behind_a_window():
    """Where a hit keeps whole read chunks only and a slot lets go of KV behind a window, a long answer would
    move the slot's window past what a next turn can keep: the read's end stores that window (checkpoint)."""
    h = CachingHarness(batch=1, prefill_chunk=512, ctx=16384)
    h.sim.kv_window, h.sim.batch_invariant = 1024, True
    h.scheduler = Scheduler(h.config, h.sim, clock=h.clock, sink=h.sink, events=h.events)
    saves = []
    save = h.sim.save_prefix
    h.sim.save_prefix = lambda key, slot, tokens, first=0: (
        saves.append((slot, tokens, first)) or save(key, slot, tokens, first)
    )
    h.submit("short", CONTEXT[:300], max_tokens=4)  # under one chunk: nothing whole to keep, no checkpoint
    h.submit("turn1", CONTEXT, max_tokens=4)
    h.run()
    exact = 4000 - 4000 % 512
    assert h.fields("CACHE_CHECKPOINT") == [
        {
            "request": "turn1",
            "slot": 0,
            "of": "read",
            "tokens": exact,
            "first": exact - 1023,
            "bytes": 1023 * 96 * 1024,
            "to": "store",
        }
    ]
    assert saves[0] == (0, exact, exact - 1023)
    held = h.scheduler.prompt_cache.cache.store.entry(1)
    assert (held.exact, held.first, held.min_keep, held.tokens) == (exact, exact - 1023, exact, tuple(CONTEXT[:exact]))
