"""The conversation cache's index: prefixes pushed out of slots, kept in host memory, capped in bytes.

Contract: `add` takes a prefix (its tokens and bytes) and returns its key and the entries evicted to make
room, least recently used first (the executor drops their bytes); an entry larger than the whole cap is
refused (key None). A prefix that another entry of the same salt already covers (every length it can give,
from its `min_keep` to its `exact`) is not added twice; entries whose tokens the new one extends are dropped
(a conversation's older turns), but a `shared` one only where the new one can give every length it can. `best` finds the entry a prompt can use most of; `touch` marks it used. Pure
Python: the bytes themselves live in the executor (runtime/prefix_copies.py on each stage).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Held:
    """A prefix whose KV sits in a slot or in the store: positions 0..len(tokens)-1."""

    tokens: tuple[int, ...]
    exact: int  # leading positions reusable at all (with align > 1: those written by reads, whole chunks)
    salt: str | None
    generation: int  # the executor's KV generation when it was written (stage ranks that restart lose it)
    min_keep: int = 0  # the fewest tokens a hit may keep: below, its window's first keys were let go of
    first: int = 0  # positions below it were let go of: a stored copy holds [first, exact)
    shared: bool = False  # a prefix other prompts were seen to share (a system prompt): only the cap takes it out


class PrefixStore:
    def __init__(self, cap_bytes: int, bytes_per_token: int):
        if cap_bytes < 1 or bytes_per_token < 1:
            raise ValueError(f"cap_bytes and bytes_per_token must be >= 1, got {cap_bytes} and {bytes_per_token}")
        self.cap_bytes, self.bytes_per_token = cap_bytes, bytes_per_token
        self._entries: OrderedDict[int, Held] = OrderedDict()  # oldest use first
        self._keys = itertools.count(1)
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, key: int) -> Held:
        return self._entries[key]

    def keys(self) -> list[int]:
        return list(self._entries)

    def bytes_of(self, held: Held) -> int:
        return max(0, held.exact - held.first) * self.bytes_per_token

    def add(self, held: Held) -> tuple[int | None, list[tuple[int, Held, str]], bool]:
        """Store `held` (its first `held.exact` tokens). Returns its key (None: refused, larger than the
        cap), the entries taken out for it as (key, entry, "covered" or "lru"), and whether its bytes must
        be copied (False: an entry already holding it was refreshed and its key returned)."""
        size = self.bytes_of(held)
        if size > self.cap_bytes or size == 0:
            return None, [], False
        dropped: list[tuple[int, Held, str]] = []
        for key, other in list(self._entries.items()):
            if other.salt != held.salt or other.generation != held.generation:
                continue
            if (
                other.exact >= held.exact
                and other.min_keep <= held.min_keep
                and other.tokens[: held.exact] == held.tokens[: held.exact]
            ):
                self._entries.move_to_end(key)
                return key, [], False
            if other.tokens[: other.exact] == held.tokens[: other.exact] and (
                not other.shared or held.min_keep <= other.min_keep
            ):
                dropped.append((key, self._pop(key), "covered"))
        while self._entries and self.nbytes + size > self.cap_bytes:
            key = next(iter(self._entries))
            dropped.append((key, self._pop(key), "lru"))
            self.evictions += 1
        key = next(self._keys)
        self._entries[key] = held
        self.nbytes += size
        return key, dropped, True

    def remove(self, key: int) -> "Held | None":
        """Take an entry out (its copy failed, or memory is short); None when it is gone already."""
        return self._pop(key) if key in self._entries else None

    def evict_oldest(self) -> tuple[int, Held] | None:
        """Memory pressure: the least recently used entry out."""
        if not self._entries:
            return None
        key = next(iter(self._entries))
        self.evictions += 1
        return key, self._pop(key)

    def best(self, usable: Callable[[Held], int]) -> tuple[int | None, int]:
        """The entry `usable` scores highest (> 0); (None, 0) when none. Changes nothing (plans are pure)."""
        best_key, best = None, 0
        for key, held in self._entries.items():
            keep = usable(held)
            if keep > best:
                best_key, best = key, keep
        return best_key, best

    def touch(self, key: int) -> None:
        """The entry was used: it is evicted last."""
        if key in self._entries:
            self._entries.move_to_end(key)

    def _pop(self, key: int) -> Held:
        held = self._entries.pop(key)
        self.nbytes -= self.bytes_of(held)
        return held

    def stats(self) -> dict[str, int]:
        return {"store_bytes": self.nbytes, "store_entries": len(self._entries), "store_evictions": self.evictions}
