"""What the prompt cache needs of an executor: `PrefixCopies`, which every executor implements.

Contract: the policy (`policy.py`) reads these members directly, never probes. An executor with the cache
(`supports_prefix_cache = True`) keeps host copies of a slot's first positions under keys the policy picks:
`runtime/prefix_copies.py` on each torch stage, `executors/sim/prefixes.py` in the simulator. One
without it inherits `NoPrefixCache`, and the policy then only prepares slots. Pure Python.
"""

from __future__ import annotations

from typing import Protocol


class PrefixCopies(Protocol):
    supports_prefix_cache: bool  # False: the prompt cache stays off whatever its size (slots are not reused)
    kv_bytes_per_token: int  # every layer's keys and values of one token: a stored token's cost; 0 = no host store
    batch_invariant: bool  # a row's logits are bitwise those of the row alone: a hit keeps only whole read chunks
    kv_window: int | None  # a slot lets go of KV this far behind its rows (kv_held); None: it keeps every position

    def save_prefix(self, key: int, slot: int, tokens: int, first: int = 0) -> None:
        """Copy positions [first, tokens) of the slot's KV into host memory under key, from the lowest one the
        slot still holds when that is higher (may raise: out of memory)."""

    def restore_prefix(self, key: int, slot: int, tokens: int) -> None:
        """Copy the first `tokens` positions stored under key into the slot."""

    def drop_prefix(self, key: int) -> None:
        """Free the copy under key."""

    def pin_prefix(self, slot: int, first: int, tokens: int) -> None:
        """Keep the slot's positions [first, tokens) through its trims behind the window until `unpin_prefix`."""

    def unpin_prefix(self, slot: int) -> None:
        """Let the slot's trims take the pinned positions again."""

    def kv_generation(self) -> int:
        """Bumped whenever KV the executor held is lost (stage ranks restarted): older prefixes are void."""

    def kv_held(self, slot: int) -> tuple[int, int]:
        """(first, min_keep) of what the slot holds: positions below `first` were let go of behind a sliding
        window (a saved copy starts there), and a hit must keep at least `min_keep` tokens; (0, 0) without one."""


class NoPrefixCache:
    """`PrefixCopies` for an executor without the prompt cache: off, and a copy asked of it is a bug."""

    supports_prefix_cache = False
    kv_bytes_per_token = 0
    batch_invariant = False
    kv_window = None

    def save_prefix(self, key: int, slot: int, tokens: int, first: int = 0) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache: save_prefix({key}, {slot}, {tokens})")

    def restore_prefix(self, key: int, slot: int, tokens: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache: restore_prefix({key}, {slot}, {tokens})")

    def drop_prefix(self, key: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache: drop_prefix({key})")

    def pin_prefix(self, slot: int, first: int, tokens: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache: pin_prefix({slot}, {first}, {tokens})")

    def unpin_prefix(self, slot: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no prompt cache: unpin_prefix({slot})")

    def kv_generation(self) -> int:
        return 0

    def kv_held(self, slot: int) -> tuple[int, int]:
        return 0, 0
