"""A prefix cache for the synthetic servers (synthetic/server.py, tests/fakes/http_engine.py): no KV, only
which prompts were read, so a test knows how many tokens a request may take from the cache.

Finished prompts are kept whole, keyed by their `cache_salt` (vLLM's semantics: prefixes are shared only
within one salt), at most `capacity_tokens` tokens in all, least recently used out first. `lookup` gives
the longest prefix of a prompt that a kept prompt shares, at most the prompt's length minus one (the last
token is always read: its logits give the first answer token). `fault="one-too-far"` plays a cache that
claims one token more than matched: the answer is then computed as if that prompt token were missing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Sequence

FAULTS = ("", "one-too-far")


@dataclass(frozen=True)
class Hit:
    cached_tokens: int  # prompt tokens taken from the cache (0: read cold)
    source: str = "slot"  # "slot" | "store", as the engine's CACHE_HIT event says
    dropped: int | None = None  # fault: the prompt index the answer is computed without


@dataclass
class PrefixCache:
    capacity_tokens: int
    slots: int = 4  # the most recently used entries count as still in a slot, older ones as in the store
    fault: str = ""
    _entries: "OrderedDict[tuple[Hashable, tuple[int, ...]], None]" = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.capacity_tokens < 0 or self.slots < 1:
            raise ValueError(f"capacity_tokens must be >= 0 and slots >= 1, got {self.capacity_tokens}, {self.slots}")
        if self.fault not in FAULTS:
            raise ValueError(f"cache fault must be one of {FAULTS}, got {self.fault!r}")

    @property
    def enabled(self) -> bool:
        return self.capacity_tokens > 0

    @property
    def held_tokens(self) -> int:
        return sum(len(prompt) for _, prompt in self._entries)

    def lookup(self, prompt: Sequence[int] | str, salt: Hashable = None) -> Hit:
        """The longest kept prefix of a token-id prompt (a text prompt is never cached)."""
        if not self.enabled or not isinstance(prompt, list) or len(prompt) < 2:
            return Hit(0)
        best, best_key, rank = 0, None, 0
        for position, key in enumerate(reversed(self._entries)):
            if key[0] != salt:
                continue
            shared = _shared(key[1], prompt)
            if shared > best:
                best, best_key, rank = shared, key, position
        best = min(best, len(prompt) - 1)
        if best == 0 or best_key is None:
            return Hit(0)
        self._entries.move_to_end(best_key)
        source = "slot" if rank < self.slots else "store"
        if self.fault == "one-too-far" and best < len(prompt) - 1:
            return Hit(best + 1, source, dropped=best)
        return Hit(best, source)

    def keep(self, prompt: Sequence[int] | str, salt: Hashable = None) -> list[int]:
        """Keep a finished token-id prompt; returns the lengths of the entries evicted to make room."""
        if not self.enabled or not isinstance(prompt, list):
            return []
        key = (salt, tuple(prompt))
        self._entries.pop(key, None)
        # a prompt that extends a kept one replaces it (the same slot grew), as an engine's slot does
        for old in [
            k for k in self._entries if k[0] == salt and len(k[1]) < len(prompt) and _shared(k[1], prompt) == len(k[1])
        ]:
            del self._entries[old]
        self._entries[key] = None
        evicted = []
        while self.held_tokens > self.capacity_tokens and len(self._entries) > 1:
            _, prompt_out = self._entries.popitem(last=False)[0]
            evicted.append(len(prompt_out))
        return evicted


def answer_prompt(prompt: Sequence[int], hit: Hit) -> list[int]:
    """The prompt the answer is computed from: the prompt itself, or without the token a fault skipped."""
    if hit.dropped is None:
        return list(prompt)
    return [*prompt[: hit.dropped], *prompt[hit.dropped + 1 :]]


def _shared(left: Sequence[int], right: Sequence[int]) -> int:
    count = 0
    for a, b in zip(left, right):
        if a != b:
            break
        count += 1
    return count
