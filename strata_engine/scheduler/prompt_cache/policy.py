"""The prompt cache inside the scheduler: placements for the plans, and what admission and release do.

Contract: `place` answers plan_step's question (which slot, how many prompt tokens kept) without changing
anything. `admit` carries a placement out, between executor calls: the slot's old prefix goes to the host
store when the new prompt does not repeat it (CACHE_EVICT; store entries pushed out by the cap too), a
store hit is copied back (`restore_prefix`), the slot is prepared to keep `keep` positions, and the
request starts with `tokens_read = cached_tokens = keep` (CACHE_HIT). `release` records what a leaving
request's slot holds: a finished or cancelled request what it completely read or fed, a failed one
nothing. `checkpoint` (a read done, where slots let go of KV behind a window) stores the window a next turn
needs. A store that cannot take a copy (memory) evicts; a request never fails for the cache. Off when
`prompt_cache_mib` is 0 or the executor's `supports_prefix_cache` is False (`copies.PrefixCopies`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any, Callable

from ...config import SchedulerConfig
from ..request import Request
from ..slots import SlotTable
from .placement import SLOT, STORE, Held, Placement, PrefixCache
from .store import PrefixStore

if TYPE_CHECKING:
    from ..protocol import Executor

MIB = 1 << 20


class PromptCache:
    def __init__(self, config: SchedulerConfig, executor: "Executor", emit: Callable[..., None]):
        self.executor, self.emit = executor, emit
        self.mib = config.prompt_cache_mib
        self.cache: PrefixCache | None = None
        if config.prompt_cache_mib > 0 and executor.supports_prefix_cache:
            bytes_per_token = int(executor.kv_bytes_per_token)
            store = PrefixStore(config.prompt_cache_mib * MIB, bytes_per_token) if bytes_per_token else None
            # Bitwise invariance claimed: reuse only what reads wrote, in whole chunks (placement.py).
            align = config.prefill_chunk if executor.batch_invariant else 1
            self.cache = PrefixCache(
                num_slots=config.batch, store=store, min_tokens=config.prompt_cache_min_tokens, align=align
            )
        self.slot_evictions = 0
        self._pins: dict[int, int] = {}  # slot -> the end of the shared prefix whose window it keeps for the store

    @property
    def enabled(self) -> bool:
        return self.cache is not None

    def _generation(self) -> int:
        return int(self.executor.kv_generation())

    # -- planning (pure) ---------------------------------------------------------------------------
    def place(self, request: Request, slots: SlotTable) -> Placement | None:
        """Where `request` would go now; None without a free slot."""
        if self.cache is None:
            slot = slots.choose()
            return None if slot is None else Placement(slot)
        cold = slots.choose(rank=self.cache.cold_rank)
        if cold is None:
            return None
        return self.cache.place(request.prompt_ids, request.cache_salt, self._generation(), slots.free_slots(), cold)

    # -- admission and release (the step thread, between executor calls) ---------------------------
    def admit(self, request: Request, placement: Placement) -> int:
        """Carry out the placement; returns the prompt tokens the request keeps."""
        slot, cache = placement.slot, self.cache
        if cache is None:
            self.executor.prepare_slot(slot)
            return 0
        if placement.pushed_out is not None:
            self._push_out(slot, placement.pushed_out)
        if placement.source == STORE:
            try:
                self.executor.restore_prefix(placement.store_key, slot, placement.keep)
            except Exception as exc:  # read it cold instead; the entry is suspect
                warnings.warn(
                    f"restore of prefix {placement.store_key} into slot {slot} failed: {exc!r}", RuntimeWarning
                )
                self._drop(placement.store_key, "failed")
                placement = dataclasses.replace(placement, keep=0, source=None, store_key=None)
        cache.taken(placement)
        self.executor.prepare_slot(slot, placement.keep)
        self._pin_shared(request, slot, placement.keep)
        request.tokens_read = request.cached_tokens = placement.keep
        if placement.keep:
            self.emit(
                "CACHE_HIT",
                request,
                tokens=placement.keep,
                source=placement.source,
                prompt_tokens=request.prompt_tokens,
            )
        return placement.keep

    def release(self, request: Request, slot: int) -> None:
        if self.cache is None:
            return
        self._store_pinned(request, slot)  # a read that ended early, past its shared prefix or not
        if request.finish_reason == "error":  # its KV is in an unknown state
            self.cache.forget(slot)
            return
        valid = request.context_tokens  # prompt tokens completely read, then the fed outputs
        tokens = (list(request.prompt_ids) + list(request.output_ids))[:valid]
        first, min_keep = self.executor.kv_held(slot)
        self.cache.record(slot, tokens, request.tokens_read, request.cache_salt, self._generation(), min_keep, first)

    # -- the store ---------------------------------------------------------------------------------
    def checkpoint(self, request: Request) -> None:
        """The request's read is done: where a slot lets go of KV behind a window and a hit keeps only whole
        read chunks, store the window before its last whole chunk's end (its checkpoint), so a next turn can
        keep that much even after a long answer moved the slot's window past it; and a pinned shared prefix's
        window (CACHE_CHECKPOINT, `of` "read" or "shared prefix")."""
        cache, window = self.cache, self.executor.kv_window
        if cache is None or request.slot is None:
            return
        self._store_pinned(request, request.slot)
        if cache.store is None or cache.align == 1 or window is None:
            return
        exact = request.prompt_tokens - request.prompt_tokens % cache.align
        if exact >= cache.min_tokens:
            self._store_window(request, request.slot, exact, "read")

    def _store_window(self, request: Request, slot: int, end: int, of: str, shared: bool = False) -> None:
        """The window before the prompt's position `end` (all of it from 0 when shorter) to the store."""
        window = self.executor.kv_window
        first = max(0, end - window + 1)
        held = Held(
            tuple(request.prompt_ids[:end]),
            end,
            request.cache_salt,
            self._generation(),
            min_keep=first + window - 1 if first else 0,
            first=first,
            shared=shared,
        )
        to = self._to_store(slot, held)
        self.emit(
            "CACHE_CHECKPOINT", request, of=of, tokens=end, first=first, bytes=self.cache.store.bytes_of(held), to=to
        )

    def _pin_shared(self, request: Request, slot: int, keep: int) -> None:
        """A prompt that shares more with a held or stored prefix than that prefix's KV can still give (a window
        moved past it): keep the shared part's window in the slot while the read writes it (`pin_prefix`), to
        store it at the read's end, so the next prompt sharing it keeps it (a system prompt, say)."""
        window, cache = self.executor.kv_window, self.cache
        if window is None or cache.store is None:
            return
        shared = cache.shared(request.prompt_ids, request.cache_salt, self._generation())
        if shared <= keep:
            return
        first = max(0, shared - window + 1)
        try:
            self.executor.pin_prefix(slot, first, shared)
        except Exception as exc:
            warnings.warn(f"keeping slot {slot}'s shared prefix failed: {exc!r}", RuntimeWarning)
            return
        self._pins[slot] = shared

    def _store_pinned(self, request: Request, slot: int) -> None:
        """The slot's pinned shared prefix to the store once the read has written it; the pin goes either way."""
        if slot not in self._pins:
            return
        end = self._pins.pop(slot)
        try:
            if request.tokens_read >= end and request.finish_reason != "error":
                self._store_window(request, slot, end, "shared prefix", shared=True)
        finally:
            self.executor.unpin_prefix(slot)

    def _push_out(self, slot: int, held: Held) -> None:
        store = self.cache.store
        to = self._to_store(slot, held) if store is not None else "dropped"
        self.slot_evictions += 1
        self.emit(
            "CACHE_EVICT",
            None,
            slot=slot,
            source=SLOT,
            tokens=len(held.tokens),
            bytes=store.bytes_of(held) if store is not None else 0,
            to=to,
        )

    def _to_store(self, slot: int, held: Held) -> str:
        """Copy what `held` names from the slot into the store: "store", or "dropped" when the store refuses it
        (larger than the cap) or the copy fails (memory: the store gives way, the request goes on)."""
        store = self.cache.store
        key, dropped, copy = store.add(held)
        for old_key, old, reason in dropped:
            self._dropped(old_key, old, reason)
        if key is None:
            return "dropped"
        if copy:
            try:
                self.executor.save_prefix(key, slot, held.exact, held.first)
            except Exception as exc:
                warnings.warn(f"saving slot {slot}'s prefix to the host store failed: {exc!r}", RuntimeWarning)
                store.remove(key)
                oldest = store.evict_oldest()
                if oldest is not None:
                    self._dropped(*oldest, "memory")
                return "dropped"
        return "store"  # copied, or an entry already holds it

    def _drop(self, key: int, reason: str) -> None:
        held = self.cache.store.remove(key)
        if held is not None:
            self._dropped(key, held, reason)

    def _dropped(self, key: int, held: Held, reason: str) -> None:
        try:
            self.executor.drop_prefix(key)
        except Exception as exc:
            warnings.warn(f"dropping stored prefix {key} failed: {exc!r}", RuntimeWarning)
        self.emit(
            "CACHE_EVICT", None, source=STORE, tokens=held.exact, bytes=self.cache.store.bytes_of(held), reason=reason
        )

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mib": self.mib,
            "slot_reuse": self.enabled,
            "store": self.cache is not None and self.cache.store is not None,
        }
        if self.cache is None:
            return {**out, "hits": 0, "evictions": 0, "store_bytes": 0}
        stats = self.cache.stats()
        return {
            **out,
            **stats,
            "slot_evictions": self.slot_evictions,
            "evictions": self.slot_evictions + stats["store_evictions"],
            "min_tokens": self.cache.min_tokens,
            "align": self.cache.align,
            "bitwise": self.cache.align > 1,
        }
