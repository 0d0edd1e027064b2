"""The simulator's side of the prompt cache: host copies as token counts, each copy charged modelled time.

Contract (`scheduler/prompt_cache/copies.PrefixCopies`): a slot hit costs nothing (`prepare_slot` keeps positions);
`save_prefix` and `restore_prefix` cost `CostProfile.copy_token_ms` per token; a stored token is counted at
`CostProfile.kv_token_bytes`. A restore of more tokens than were saved, or from a slot that does not hold
what is saved, raises ValueError, so a scheduler bug surfaces in tests.
"""

from __future__ import annotations


class SimPrefixCopies:
    supports_prefix_cache = True
    batch_invariant = False  # claimed by no cost model: a hit keeps every held token, not whole read chunks
    kv_window = None  # no sliding window: a slot keeps every position

    @property
    def kv_bytes_per_token(self) -> int:
        return self.profile.kv_token_bytes

    def kv_generation(self) -> int:
        return 0

    def kv_held(self, slot: int) -> tuple[int, int]:
        return 0, 0  # the simulator lets go of no KV: no sliding window

    def _copy(self, tokens: int) -> None:
        self._begin()
        ms = tokens * self.profile.copy_token_ms
        self._wait_until(ms)
        self._end(ms)

    def save_prefix(self, key: int, slot: int, tokens: int, first: int = 0) -> None:
        held = self._kv[slot] if slot in self._kv else self._held.get(slot, 0)  # a live slot, or a freed one's
        if not 0 < tokens <= held:
            raise ValueError(f"save_prefix({key}, slot {slot}, {tokens} tokens): the slot holds {held}")
        self._copy(tokens - first)
        self._stored[key] = tokens

    def restore_prefix(self, key: int, slot: int, tokens: int) -> None:
        stored = self._stored.get(key)
        if stored is None or not 0 < tokens <= stored:
            raise ValueError(f"restore_prefix({key}, slot {slot}, {tokens} tokens): the store holds {stored}")
        self._copy(tokens)
        self._held[slot] = tokens

    def pin_prefix(self, slot: int, first: int, tokens: int) -> None:
        pass  # the simulator lets go of no KV (kv_window None): nothing to keep

    def unpin_prefix(self, slot: int) -> None:
        pass

    def drop_prefix(self, key: int) -> None:
        self._stored.pop(key, None)
