"""The prompt cache's host copies on one stage: each stage (a thread's or a rank's) copies its own layers.

The torch side of `scheduler/prompt_cache/copies.PrefixCopies` (`TorchExecutor.save_prefix` and the rest
send these). Contract: a `PrefixCopy` (save, restore, drop; pin or unpin a slot's [first, tokens) through its
trims; key, slot, tokens, first) travels through the
stages in order with the micro-batches (a thread stage's queue, a stage rank's COPY frame), so it runs
between the forwards before and after it; `HostPrefixes.apply` carries it out on the stage's `KVCache`
(model/kv_cache.py). A save that cannot get the memory raises; the scheduler's store then evicts
(scheduler/prompt_cache/policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.kv_cache import KVCache

OPS = ("save", "restore", "drop", "pin", "unpin")


@dataclass(frozen=True)
class PrefixCopy:
    op: str
    key: int
    slot: int = 0
    tokens: int = 0
    first: int = 0  # a save: the lowest position to copy (a window checkpoint), else what the slot holds

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"a prefix copy is one of {OPS}, got {self.op!r}")

    def to_text(self) -> bytes:
        return f"{self.op} {self.key} {self.slot} {self.tokens} {self.first}".encode()

    @classmethod
    def from_text(cls, data: bytes) -> "PrefixCopy":
        op, *numbers = data.decode().split()
        return cls(op, *map(int, numbers))


class HostPrefixes:
    """One stage's copies: key -> its layers' keys and values of a prefix, in host memory."""

    def __init__(self, cache: KVCache):
        self.cache = cache
        self._copies: dict[int, dict] = {}

    def apply(self, copy: PrefixCopy) -> None:
        if copy.op == "save":
            self._copies[copy.key] = self.cache.save(copy.slot, copy.tokens, copy.first)
        elif copy.op == "restore":
            if copy.key not in self._copies:
                raise KeyError(f"no stored prefix {copy.key} on this stage (layers {sorted(self.cache.layers)})")
            self.cache.restore(self._copies[copy.key], copy.slot, copy.tokens)
        elif copy.op == "pin":
            self.cache.pin(copy.slot, copy.first, copy.tokens)
        elif copy.op == "unpin":
            self.cache.unpin(copy.slot)
        else:
            self._copies.pop(copy.key, None)

    @property
    def nbytes(self) -> int:
        return sum(saved.nbytes for saved in self._copies.values())
