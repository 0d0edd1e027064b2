"""Decode slots and their batch groups: which request holds which slot.

Contract: `--batch N` slots split into groups (`SchedulerConfig.group_slots()`); a slot holds at most
one request (reading, parked or decoding) until released. New requests go to the group with the
fewest occupied slots, so the pipelined groups stay balanced. Owned by the scheduler thread.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .request import Phase, Request


class SlotTable:
    def __init__(self, groups: Sequence[Sequence[int]]):
        slots = [s for g in groups for s in g]
        if not slots or sorted(slots) != list(range(len(slots))):
            raise ValueError(f"groups must partition slots 0..N-1 without gaps, got {groups!r}")
        self.groups: tuple[tuple[int, ...], ...] = tuple(tuple(g) for g in groups)
        self._owner: list[Request | None] = [None] * len(slots)
        self._group_of = {slot: gi for gi, g in enumerate(self.groups) for slot in g}

    @property
    def size(self) -> int:
        return len(self._owner)

    def owner(self, slot: int) -> Request | None:
        return self._owner[slot]

    def group_of(self, slot: int) -> int:
        return self._group_of[slot]

    def free_count(self) -> int:
        return sum(1 for r in self._owner if r is None)

    def occupied(self) -> list[Request]:
        return [r for r in self._owner if r is not None]

    def free_slots(self) -> list[int]:
        return [s for s, r in enumerate(self._owner) if r is None]

    def choose(self, rank: Callable[[int], Any] | None = None) -> int | None:
        """A free slot in the group with the fewest occupied slots (ties: lowest group); in the group the
        lowest slot, or the lowest by `rank` (the prompt cache: empty slots before ones holding a prefix)."""
        best: tuple[int, int, int] | None = None
        for gi, group in enumerate(self.groups):
            free = [s for s in group if self._owner[s] is None]
            if not free:
                continue
            key = (len(group) - len(free), gi, min(free, key=lambda s: (rank(s), s)) if rank else free[0])
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def assign(self, slot: int, request: Request) -> None:
        if self._owner[slot] is not None:
            raise RuntimeError(
                f"slot {slot} is held by {self._owner[slot].request_id}; cannot give it to {request.request_id}"
            )
        self._owner[slot] = request
        request.slot = slot

    def release(self, slot: int) -> Request:
        request = self._owner[slot]
        if request is None:
            raise RuntimeError(f"slot {slot} is already free")
        self._owner[slot] = None
        return request

    def decoding_groups(self) -> tuple[tuple[Request, ...], ...]:
        """Per group, its decoding requests in slot order; groups with none are left out."""
        out = []
        for group in self.groups:
            live = tuple(r for s in group if (r := self._owner[s]) is not None and r.phase is Phase.DECODING)
            if live:
                out.append(live)
        return tuple(out)
