"""The prompt cache's pure policy (scheduler/prompt_cache/placement.py, store.py) at the spec's sizes: an agent's
4,000-token context, 64 new tokens, 512-token chunks; no torch, no executor."""

from __future__ import annotations

import pytest

from strata_engine.scheduler.prompt_cache.placement import SLOT, STORE, PrefixCache, common_prefix
from strata_engine.scheduler.prompt_cache.store import Held, PrefixStore

CHUNK = 512
CONTEXT = [(7 + 31 * i) % 997 for i in range(4000)]
REPLY = [(11 + 13 * i) % 997 for i in range(64)]
NEXT_TURN = CONTEXT + REPLY + [(5 + 3 * i) % 997 for i in range(64)]  # the context, the reply, a tool result


def held_after_turn(salt=None, generation=0):
    """What a slot holds after the first turn: the prompt read, the reply fed back but its last token."""
    return Held(tuple(CONTEXT + REPLY[:-1]), 4000 - 4000 % CHUNK, salt, generation)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([], [1], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2], 2),
        ([1, 2, 3], [1, 9, 3], 1),
        (list(range(5000)), list(range(4999)) + [0], 4999),
    ],
)
def test_common_prefix(a, b, expected):
    assert common_prefix(a, b) == expected == common_prefix(b, a)


def test_an_agents_next_turn_keeps_whole_chunks_of_what_was_read():
    cache = PrefixCache(num_slots=2, store=None, min_tokens=32, align=CHUNK)
    cache.record(0, CONTEXT + REPLY[:-1], read_tokens=4000, salt=None, generation=0)
    placement = cache.place(NEXT_TURN, None, 0, free=[0, 1], cold_slot=1)
    # whole chunks of the 4,000 read positions: the rest is read in the chunks a cold read uses
    assert (placement.slot, placement.keep, placement.source) == (0, 3584, SLOT)
    assert placement.pushed_out is None  # the new prompt repeats everything the slot held


def test_without_the_bitwise_claim_the_match_runs_over_the_fed_reply_too():
    cache = PrefixCache(num_slots=2, store=None, min_tokens=32, align=1)
    cache.record(0, CONTEXT + REPLY[:-1], read_tokens=4000, salt=None, generation=0)
    assert cache.place(NEXT_TURN, None, 0, free=[0, 1], cold_slot=1).keep == 4063


def test_the_last_prompt_token_is_always_read():
    cache = PrefixCache(num_slots=1, store=None, min_tokens=32, align=1)
    cache.record(0, CONTEXT, read_tokens=4000, salt=None, generation=0)
    assert cache.place(CONTEXT, None, 0, free=[0], cold_slot=0).keep == 3999  # the same prompt again
    assert cache.place(CONTEXT[:100], None, 0, free=[0], cold_slot=0).keep == 99


@pytest.mark.parametrize(
    "salt, generation, min_tokens, expected",
    [(None, 0, 32, 3584), ("agent-1", 0, 32, 0), (None, 1, 32, 0), (None, 0, 4000, 0)],
    ids=["same namespace", "another salt", "KV lost since", "under the threshold"],
)
def test_what_a_match_needs(salt, generation, min_tokens, expected):
    cache = PrefixCache(num_slots=1, store=None, min_tokens=min_tokens, align=CHUNK)
    assert cache.usable(held_after_turn(), NEXT_TURN, salt, generation) == expected


def test_a_salted_prefix_is_only_shared_within_its_salt():
    cache = PrefixCache(num_slots=1, store=None, min_tokens=32, align=CHUNK)
    salted = held_after_turn(salt="agent-1")
    assert cache.usable(salted, NEXT_TURN, "agent-1", 0) == 3584
    assert cache.usable(salted, NEXT_TURN, None, 0) == 0 and cache.usable(salted, NEXT_TURN, "agent-2", 0) == 0


def test_the_longest_match_wins_and_a_cold_request_takes_an_empty_slot_first():
    cache = PrefixCache(num_slots=3, store=None, min_tokens=32, align=1)
    cache.record(0, CONTEXT[:1000], read_tokens=1000, salt=None, generation=0)
    cache.record(1, CONTEXT[:3000], read_tokens=3000, salt=None, generation=0)
    assert cache.place(NEXT_TURN, None, 0, free=[0, 1, 2], cold_slot=2).slot == 1
    assert sorted(range(3), key=cache.cold_rank) == [2, 0, 1]  # empty, then least recently used
    other = [1] * 500
    placement = cache.place(other, None, 0, free=[0, 1], cold_slot=0)
    assert (placement.keep, placement.source, placement.pushed_out.tokens) == (0, None, tuple(CONTEXT[:1000]))


def test_a_failed_or_short_request_leaves_nothing_to_match():
    cache = PrefixCache(num_slots=1, store=None, min_tokens=32, align=CHUNK)
    cache.record(0, CONTEXT[:700], read_tokens=700, salt=None, generation=0)
    assert cache.held(0).exact == 512
    cache.record(0, CONTEXT[:300], read_tokens=300, salt=None, generation=0)  # not one whole chunk read
    assert cache.held(0) is None
    cache.record(0, CONTEXT, read_tokens=4000, salt=None, generation=0)
    cache.forget(0)
    assert cache.place(NEXT_TURN, None, 0, free=[0], cold_slot=0).keep == 0


def test_the_store_wins_when_it_holds_more():
    store = PrefixStore(cap_bytes=64 << 20, bytes_per_token=4096)
    key, dropped, copy = store.add(held_after_turn())
    assert (dropped, copy, store.nbytes) == ([], True, 3584 * 4096)
    cache = PrefixCache(num_slots=2, store=store, min_tokens=32, align=CHUNK)
    cache.record(0, CONTEXT[:1024], read_tokens=1024, salt=None, generation=0)
    placement = cache.place(NEXT_TURN, None, 0, free=[0, 1], cold_slot=1)
    assert (placement.slot, placement.keep, placement.source, placement.store_key) == (1, 3584, STORE, key)


def test_the_store_evicts_least_recently_used_first_and_refuses_what_the_cap_cannot_hold():
    store = PrefixStore(cap_bytes=3 * 1024 * 4096, bytes_per_token=4096)  # three 1,024-token prefixes
    keys = []
    for agent in range(3):
        tokens = tuple(agent * 1000 + i for i in range(1024))
        keys.append(store.add(Held(tokens, 1024, None, 0))[0])
    assert store.best(lambda h: 1 if h.tokens[0] == 0 else 0) == (keys[0], 1)
    store.touch(keys[0])  # agent 0 came back: agent 1 is now the least recently used
    key, dropped, _ = store.add(Held(tuple(range(9000, 10024)), 1024, None, 0))
    assert [(k, reason) for k, _, reason in dropped] == [(keys[1], "lru")] and store.evictions == 1
    assert store.add(Held(tuple(range(4 * 1024)), 4 * 1024, None, 0)) == (None, [], False)
    assert store.nbytes == 3 * 1024 * 4096


def test_the_store_keeps_one_copy_of_a_conversation():
    store = PrefixStore(cap_bytes=64 << 20, bytes_per_token=4096)
    first, _, _ = store.add(Held(tuple(CONTEXT[:2048]), 2048, None, 0))
    longer, dropped, copy = store.add(Held(tuple(CONTEXT), 3584, None, 0))
    assert copy and [(k, reason) for k, _, reason in dropped] == [(first, "covered")] and len(store) == 1
    again, dropped, copy = store.add(Held(tuple(CONTEXT[:3000]), 2560, None, 0))
    assert (again, dropped, copy) == (longer, [], False)
    other_salt, _, copy = store.add(Held(tuple(CONTEXT), 3584, "agent-1", 0))
    assert copy and other_salt != longer and len(store) == 2


def test_a_prefix_whose_early_window_was_let_go_of_serves_only_long_enough_hits():
    """Behind a sliding window the executor let go of positions below 1,024 (window 1,024: min_keep 2,047).
    The next turn keeps 3,584 tokens; a prompt sharing only the first 2,000 would need keys below 1,024."""
    cache = PrefixCache(num_slots=2, store=None, min_tokens=32, align=CHUNK)
    cache.record(0, CONTEXT + REPLY[:-1], read_tokens=4000, salt=None, generation=0, min_keep=2047, first=1024)
    assert cache.place(NEXT_TURN, None, 0, free=[0, 1], cold_slot=1).keep == 3584
    short = cache.place(CONTEXT[:2000] + REPLY, None, 0, free=[0, 1], cold_slot=1)
    assert (short.keep, short.source) == (0, None)  # 1,536 whole chunks < 2,047: read cold
    cache.record(1, CONTEXT[:1500], read_tokens=1500, salt=None, generation=0, min_keep=2047, first=1024)
    assert cache.held(1) is None  # nothing it holds could serve a hit


def test_the_store_charges_what_it_copies_from_the_first_position_held():
    store = PrefixStore(cap_bytes=64 << 20, bytes_per_token=4096)
    store.add(Held(tuple(CONTEXT), 3584, None, 0, min_keep=2047, first=1024))
    assert store.nbytes == (3584 - 1024) * 4096
