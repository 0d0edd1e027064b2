"""The KV cache: per layer, preallocated keys and values for every decode slot.

Shapes: `LayerKV.k` and `LayerKV.v` are `[num_slots, num_kv_heads, ctx, head_dim]`; slot s's token at
position p lives at `[s, :, p, :]`. Each layer owns its tensors, so a layer split can place each stage's
layers on that stage's device (`KVCache(..., layers=range(0, 2), device="cuda:0")`). Writing a position at
or past `ctx` raises `ContextOverflowError` naming the slot, the position and ctx; nothing is written.
`save` / `restore` copy a slot's first positions to host memory and back (the prompt cache's store).
On CPU the tensors sit in an anonymous private mapping: pages read as zero and the OS commits them as
positions are written, so a slot's resident memory follows the positions it used, not `ctx`; `reset`
hands a slot's pages back.
"""
from __future__ import annotations

import mmap
from typing import TYPE_CHECKING, Sequence

import torch

if TYPE_CHECKING:
    from .config import ModelConfig


class ContextOverflowError(ValueError):
    """A write at a position >= ctx: the request is longer than the slot's cache."""

    def __init__(self, slot: int, position: int, ctx: int):
        super().__init__(f"slot {slot}: position {position} does not fit in the KV cache (ctx={ctx}; positions 0..{ctx - 1})")
        self.slot, self.position, self.ctx = slot, position, ctx


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, mmap.mmap | None]:
    """Zeros of `shape`; on CPU in an anonymous mapping whose pages are committed when first written (and
    the mapping, for `release`), elsewhere torch.zeros (and None)."""
    count = 1
    for size in shape:
        count *= size
    if torch.device(device).type != "cpu" or count == 0 or not hasattr(mmap, "MAP_PRIVATE"):
        return torch.zeros(shape, dtype=dtype, device=device), None
    pages = mmap.mmap(-1, count * torch.empty((), dtype=dtype).element_size(), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(pages, dtype=dtype).view(shape), pages  # the tensor keeps the mapping alive


def release(pages: mmap.mmap | None, tensor: torch.Tensor, index: int) -> bool:
    """Hand `tensor[index]`'s pages back to the OS (they read as zero again); False where it cannot."""
    row = tensor[index]
    start = row.storage_offset() * row.element_size()
    length = row.numel() * row.element_size()
    if pages is None or not hasattr(mmap, "MADV_DONTNEED") or start % mmap.PAGESIZE or length % mmap.PAGESIZE:
        return False
    pages.madvise(mmap.MADV_DONTNEED, start, length)
    return True


class LayerKV:
    """One layer's cache. k, v: [num_slots, num_kv_heads, ctx, head_dim]."""

    def __init__(self, num_slots: int, num_kv_heads: int, ctx: int, head_dim: int, dtype: torch.dtype, device: torch.device | str):
        shape = (num_slots, num_kv_heads, ctx, head_dim)
        self.k, self._k_pages = lazy_zeros(shape, dtype, device)
        self.v, self._v_pages = lazy_zeros(shape, dtype, device)

    @property
    def num_slots(self) -> int:
        return self.k.shape[0]

    @property
    def ctx(self) -> int:
        return self.k.shape[2]

    def check(self, bounds: list[list[int]]) -> None:
        """bounds: one [slot, first position, last position] per row. Raise before anything is written:
        ContextOverflowError past ctx, ValueError for a bad or repeated slot or a negative position."""
        seen = set()
        for slot, first, last in bounds:
            if not 0 <= slot < self.num_slots:
                raise ValueError(f"slot {slot} out of range [0, {self.num_slots})")
            if slot in seen:
                raise ValueError(f"slot {slot} appears in two rows of one call")
            seen.add(slot)
            if first < 0:
                raise ValueError(f"slot {slot}: negative position {first}")
            if last >= self.ctx:
                raise ContextOverflowError(slot, last, self.ctx)

    def write_row(self, slot: int, first: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor | None = None) -> None:
        """k, v: [T, num_kv_heads, head_dim] of one row; at positions first..first+T-1, or at `positions` [T]."""
        at = slice(first, first + k.shape[0]) if positions is None else positions
        self.k[slot, :, at] = k.transpose(0, 1).to(self.k.dtype)  # [Hkv, T, hd] either way (the slot is selected first)
        self.v[slot, :, at] = v.transpose(0, 1).to(self.v.dtype)

    def reset(self, slot: int) -> None:
        """Zero the slot, handing its pages back where it can. Correctness does not need it (attention reads
        only positions already written)."""
        for tensor, pages in ((self.k, self._k_pages), (self.v, self._v_pages)):
            if not release(pages, tensor, slot):
                tensor[slot].zero_()

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class KVCache:
    """Every layer's LayerKV (or those of `layers` only, for one pipeline stage), indexable by absolute layer."""

    def __init__(
        self,
        config: "ModelConfig",
        num_slots: int,
        ctx: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        layers: Sequence[int] | None = None,
    ):
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        if ctx < 1:
            raise ValueError(f"ctx must be >= 1, got {ctx}")
        layer_ids = list(range(config.num_layers)) if layers is None else list(layers)
        for i in layer_ids:
            if not 0 <= i < config.num_layers:
                raise ValueError(f"layer {i} outside [0, {config.num_layers})")
        self.num_slots, self.ctx = num_slots, ctx
        self.layers: dict[int, LayerKV] = {
            i: LayerKV(num_slots, config.num_kv_heads, ctx, config.head_dim, dtype, device) for i in layer_ids
        }

    def __getitem__(self, layer: int) -> LayerKV:
        try:
            return self.layers[layer]
        except KeyError:
            raise KeyError(f"layer {layer} is not held by this cache (layers {sorted(self.layers)})") from None

    def reset(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} out of range [0, {self.num_slots})")
        for layer in self.layers.values():
            layer.reset(slot)

    def save(self, slot: int, tokens: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Host copies of the slot's positions [0, tokens) in every layer held: {layer: (k, v)}, each
        [num_kv_heads, tokens, head_dim] (the prompt cache's store; the slot is untouched)."""
        if not 0 < tokens <= self.ctx:
            raise ValueError(f"cannot save {tokens} positions of a {self.ctx}-position cache")
        return {i: (layer.k[slot, :, :tokens].to("cpu", copy=True), layer.v[slot, :, :tokens].to("cpu", copy=True))
                for i, layer in self.layers.items()}

    def restore(self, saved: dict[int, tuple[torch.Tensor, torch.Tensor]], slot: int, tokens: int) -> None:
        """Write the first `tokens` positions of `save`'s copies back into `slot` (any slot), every layer held."""
        if set(saved) != set(self.layers):
            raise ValueError(f"saved layers {sorted(saved)} are not this cache's {sorted(self.layers)}")
        for i, (k, v) in saved.items():
            if not 0 < tokens <= k.shape[1]:
                raise ValueError(f"cannot restore {tokens} positions from a copy of {k.shape[1]}")
            self.layers[i].k[slot, :, :tokens].copy_(k[:, :tokens])
            self.layers[i].v[slot, :, :tokens].copy_(v[:, :tokens])

    def free(self) -> None:
        """Drop the tensors (device memory goes back to the allocator); the cache is unusable afterwards."""
        self.layers = {}

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())
