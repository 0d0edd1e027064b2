"""The prompt cache's placement: what a free slot still holds, which slot a new request takes, how much of its
prompt it keeps. Pure Python (no torch), owned by the scheduler's step thread.

Contract: a finished request's slot keeps its tokens (`record`) until a new request takes the slot. `place`
picks the free slot holding the longest usable prefix of the new prompt, or a restore from the host store
(`store.PrefixStore`) when that is longer, or a cold slot (balanced groups; an empty slot before the
least recently used one). A prefix is usable only under the same `cache_salt` and KV generation, never past
`len(prompt) - 1` (the last prompt token is always read, so its logits exist), and never shorter than
`min_tokens` or than the held prefix's `min_keep` (KV behind a sliding window is let go of). With `align` > 1 (the executor claims bitwise batch invariance) only positions written by
reads are reused and the length is rounded down to whole chunks, so the rest is read in exactly the chunks
a cold read uses and a cached answer has the cold answer's bits.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from .store import Held, PrefixStore

SLOT, STORE = "slot", "store"


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix, by slice comparisons (C speed) narrowed by halving."""
    lo, hi = 0, min(len(a), len(b))
    if list(a[:hi]) == list(b[:hi]):
        return hi
    while hi - lo > 1:  # invariant: a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if list(a[lo:mid]) == list(b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Placement:
    """Where a waiting request goes and what it keeps: `keep` prompt tokens from `source` (None = cold)."""

    slot: int
    keep: int = 0
    source: str | None = None  # SLOT or STORE
    store_key: int | None = None
    pushed_out: Held | None = None  # what the slot held and loses (the store may take it)


class PrefixCache:
    def __init__(self, *, num_slots: int, store: PrefixStore | None, min_tokens: int, align: int = 1):
        if min_tokens < 1 or align < 1:
            raise ValueError(f"min_tokens and align must be >= 1, got {min_tokens} and {align}")
        self.store = store
        self.min_tokens, self.align = min_tokens, align
        self._held: list[Held | None] = [None] * num_slots
        self._used = [0] * num_slots  # tick of the slot's last record or hit: least recently used goes first
        self._ticks = itertools.count(1)
        self.hits = {SLOT: 0, STORE: 0}
        self.cached_tokens = 0

    # -- what slots hold ---------------------------------------------------------------------------
    def held(self, slot: int) -> Held | None:
        return self._held[slot]

    def record(
        self,
        slot: int,
        tokens: Sequence[int],
        read_tokens: int,
        salt: str | None,
        generation: int,
        min_keep: int = 0,
        first: int = 0,
    ) -> None:
        """A request left `slot`; `tokens` (its prompt and fed outputs) have KV there, the first
        `read_tokens` of them written by reads, and a hit must keep at least `min_keep` of them (the
        executor let go of the KV below position `first`, behind a sliding window). A request that failed records nothing (`forget`)."""
        exact = len(tokens) if self.align == 1 else read_tokens - read_tokens % self.align
        usable = exact >= max(self.min_tokens, min_keep)
        self._held[slot] = Held(tuple(tokens), exact, salt, generation, min_keep, first) if usable else None
        self._used[slot] = next(self._ticks)

    def forget(self, slot: int) -> None:
        self._held[slot] = None

    # -- matching ----------------------------------------------------------------------------------
    def usable(self, held: Held | None, prompt: Sequence[int], salt: str | None, generation: int) -> int:
        """Prompt tokens `held` can give a request: 0 when under min_tokens or another namespace."""
        if held is None or held.salt != salt or held.generation != generation:
            return 0
        keep = min(common_prefix(held.tokens, prompt), held.exact, len(prompt) - 1)
        keep -= keep % self.align
        return keep if keep >= max(self.min_tokens, held.min_keep) else 0

    def shared(self, prompt: Sequence[int], salt: str | None, generation: int) -> int:
        """The longest prefix of `prompt` that a held or stored prefix has too, whether or not its KV can still
        serve it (a window may have moved past it), in whole `align`s, at least `min_tokens`; else 0."""
        best = 0
        entries = [h for h in self._held if h is not None]
        if self.store is not None:
            entries += [self.store.entry(key) for key in self.store.keys()]
        for held in entries:
            if held.salt == salt and held.generation == generation:
                best = max(best, min(common_prefix(held.tokens, prompt), held.exact, len(prompt) - 1))
        best -= best % self.align
        return best if best >= self.min_tokens else 0

    def cold_rank(self, slot: int) -> tuple[int, int]:
        """Order of free slots for a request without a hit: empty ones first, then least recently used."""
        return (self._held[slot] is not None, self._used[slot])

    def place(
        self, prompt: Sequence[int], salt: str | None, generation: int, free: Sequence[int], cold_slot: int
    ) -> Placement:
        """The placement of a request with this prompt: the longest hit among the free slots and the store
        (a slot wins a tie: nothing to copy), else `cold_slot` (the balanced choice, ranked by cold_rank)."""
        best_slot, best = None, 0
        for slot in free:
            keep = self.usable(self._held[slot], prompt, salt, generation)
            if keep > best:
                best_slot, best = slot, keep
        key, from_store = None, 0
        if self.store is not None:
            key, from_store = self.store.best(lambda held: self.usable(held, prompt, salt, generation))
        if best_slot is not None and best >= from_store:
            return Placement(best_slot, best, SLOT, pushed_out=self._lost(best_slot, prompt, salt, generation))
        if key is not None:
            return Placement(
                cold_slot, from_store, STORE, key, pushed_out=self._lost(cold_slot, prompt, salt, generation)
            )
        return Placement(cold_slot, pushed_out=self._lost(cold_slot, prompt, salt, generation))

    def _lost(self, slot: int, prompt: Sequence[int], salt: str | None, generation: int) -> Held | None:
        """What the slot holds that the new request will not hold after it (None: nothing is lost): all of
        it under another salt, else what lies beyond the prompt's repeat of it; void KV is no loss."""
        held = self._held[slot]
        if held is None or held.generation != generation:
            return None
        if held.salt == salt and common_prefix(held.tokens, prompt) >= len(held.tokens):
            return None
        return held

    def taken(self, placement: Placement) -> None:
        """The placement happened: the slot now belongs to a live request."""
        self._held[placement.slot] = None
        if placement.source is not None:
            self.hits[placement.source] += 1
            if placement.store_key is not None and self.store is not None:
                self.store.touch(placement.store_key)
            self.cached_tokens += placement.keep

    def stats(self) -> dict[str, int]:
        store = (
            self.store.stats()
            if self.store is not None
            else {"store_bytes": 0, "store_entries": 0, "store_evictions": 0}
        )
        return {
            "hits": sum(self.hits.values()),
            "slot_hits": self.hits[SLOT],
            "store_hits": self.hits[STORE],
            "cached_tokens": self.cached_tokens,
            "slots_holding": sum(h is not None for h in self._held),
            **store,
        }
