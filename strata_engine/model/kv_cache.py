"""The KV cache: per layer, preallocated keys and values for every decode slot.

Shapes: `LayerKV.k` and `LayerKV.v` are `[num_slots, num_kv_heads, ctx, head_dim]`; slot s's token at
position p lives at `[s, :, p, :]`. Each layer owns its tensors, so a layer split can place each stage's
layers on that stage's device (`KVCache(..., layers=range(0, 2), device="cuda:0")`). Writing a position at
or past `ctx` raises `ContextOverflowError` naming the slot, the position and ctx; nothing is written.
`save` / `restore` copy a slot's first positions to host memory and back (the prompt cache's store).
On CPU the tensors sit in an anonymous private mapping (lazy_pages.py): pages read as zero and the OS commits them as
positions are written, so a slot's resident memory follows the positions it used, not `ctx`; `reset`
hands a slot's pages back. With a sliding window W, `trim(rows)` (each stage, before a forward) hands back
the pages of positions below `trim_floor(row.first)`: W + TRIM_MARGIN behind the row, which no query of it
or after it reads, and which a later turn keeping at least floor + W - 1 tokens does not need either. A
slot then holds at most `positions_at_rest(W)` positions between forwards and a chunk more inside one, at
any context. `save` copies from the lowest position still held (or from `first`: a window checkpoint).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from .kv_format import kv_format
from .lazy_pages import committed_bytes, lazy_zeros, release

if TYPE_CHECKING:
    from .config import ModelConfig


class ContextOverflowError(ValueError):
    """A write at a position >= ctx: the request is longer than the slot's cache."""

    def __init__(self, slot: int, position: int, ctx: int):
        super().__init__(
            f"slot {slot}: position {position} does not fit in the KV cache (ctx={ctx}; positions 0..{ctx - 1})"
        )
        self.slot, self.position, self.ctx = slot, position, ctx


TRIM_MARGIN = 64  # positions held behind the window: a next turn may keep a prefix that ends this far back
TRIM_STEP = 32  # the floor moves in whole steps of positions: one float32 page of a head's row (32 x 128 B)


def trim_floor(first: int, window: int | None) -> int:
    """The positions a row writing from `first` on lets go of: [0, floor). 0 without a window."""
    if window is None:
        return 0
    floor = first + 1 - window - TRIM_MARGIN
    return max(0, floor - floor % TRIM_STEP)


def positions_held(window: int | None, chunk: int) -> int | None:
    """The most positions a slot commits at any context when it trims behind `window` and writes at most
    `chunk` positions a forward: [trim_floor(first), first + chunk). None without a window (it keeps all)."""
    if window is None:
        return None
    return positions_at_rest(window) + chunk


def positions_at_rest(window: int | None) -> int | None:
    """The most positions a slot commits between forwards (after a decode row's trim): the window, the margin
    and a step. None without a window."""
    return None if window is None else window + TRIM_MARGIN + TRIM_STEP


@dataclass(frozen=True)
class SavedPrefix:
    """`KVCache.save`'s host copy: positions [first, tokens) of every layer held, {layer: its format's parts
    (k, v and any scales, `LayerKV.parts` in order)} each [num_kv_heads, tokens - first, ...], as stored (a
    quantized cache's copy costs its quantized bytes); positions below `first` were let go of (`trim`)."""

    first: int
    tokens: int
    layers: dict[int, tuple[torch.Tensor, ...]]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for kv in self.layers.values() for t in kv)


class LayerKV:
    """One layer's cache in a format (model/kv_format.py). k, v: [num_slots, num_kv_heads, ctx, head_dim] (the
    4-bit values: head_dim / 2 bytes), and a quantized format's scales [num_slots, num_kv_heads, ctx]: `parts`."""

    def __init__(
        self,
        num_slots: int,
        num_kv_heads: int,
        ctx: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        window: int | None = None,
        kv_dtype: str | None = None,
    ):
        self.format = kv_format(kv_dtype)
        self.parts: dict[str, torch.Tensor] = {}
        self._pages: dict[str, mmap.mmap | None] = {}
        for name, (shape, part_dtype) in self.format.parts((num_slots, num_kv_heads, ctx, head_dim), dtype).items():
            self.parts[name], self._pages[name] = lazy_zeros(shape, part_dtype, device)
        self.k, self.v = self.parts["k"], self.parts["v"]
        self._dtypes = {name: t.dtype for name, t in self.parts.items()}
        # Reads are views of the cache in the model's dtype: today's path (the native ops, the compiled step).
        self.views = self.format.name in ("model", "f32", "bf16") and self.k.dtype == dtype
        self.window = window
        self.held_from = [0] * num_slots  # per slot, the lowest position whose pages may be committed
        self.pinned: dict[int, tuple[int, int]] = {}  # slot -> positions [lo, hi) a trim keeps (`KVCache.pin`)
        self._above_pin: dict[int, int] = {}  # slot -> how far above its pinned range it has let go of

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

    def write_row(
        self,
        slot: int,
        first: int,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor | None = None,
        codec=None,
    ) -> None:
        """k, v: [T, num_kv_heads, head_dim] of one row; at positions first..first+T-1, or at `positions` [T]
        whose lowest is `first` (model/rows.Row.first). `codec` (the runtime's native one, or None): its
        `write(self, slot, first, k, v)` stores consecutive positions, bitwise the format's encode, or answers
        False (then the format's encode)."""
        at = slice(first, first + k.shape[0]) if positions is None else positions
        self.held_from[slot] = min(self.held_from[slot], first)
        if self.views:  # [Hkv, T, hd] either way (the slot is selected first)
            self.k[slot, :, at] = k.transpose(0, 1).to(self.k.dtype)
            self.v[slot, :, at] = v.transpose(0, 1).to(self.v.dtype)
            return
        if positions is None and codec is not None and codec.write(self, slot, first, k, v):
            return
        for name, values in self.format.encode(k.transpose(0, 1), v.transpose(0, 1), self._dtypes).items():
            self.parts[name][slot, :, at] = values

    def read(self, slot: int, low: int, high: int, codec=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The slot's keys and values at positions [low, high), [1, Hkv, high - low, hd]: views in the model's
        dtype where the format stores that (`views`), else dequantized float32 copies (`codec.read(self, slot,
        low, high)`'s where it answers, bitwise the format's decode)."""
        if self.views:
            return self.k[slot : slot + 1, :, low:high], self.v[slot : slot + 1, :, low:high]
        if codec is not None and (copies := codec.read(self, slot, low, high)) is not None:
            return copies
        return self.format.decode({name: t[slot : slot + 1, :, low:high] for name, t in self.parts.items()})

    def first_read(self, first: int) -> int:
        """The lowest position a row writing from `first` on reads through `read`: 0 where reads are views
        (today's path), else one before the window's first key (model/attention.py's paths then stay the same)."""
        if self.views or self.window is None:
            return 0
        return max(0, first - self.window)

    def let_go(self, slot: int, low: int, high: int) -> None:
        """Hand back the pages of positions [low, high) of the slot, every head (kept where they cannot go)."""
        for name, tensor in self.parts.items():
            # Positions below what the slot holds are never read again: reach back over a page of them, so a
            # scale's pages (1,024 positions each) go back too when the floor moves by less than a page.
            reach = max(0, low - mmap.PAGESIZE // (tensor[0, 0, 0].numel() * tensor.element_size()))
            start = reach if low <= self.held_from[slot] else low
            for head in range(tensor.shape[1]):
                release(self._pages[name], tensor[slot, head, start:high])

    def trim(self, slot: int, floor: int) -> None:
        """Let go of the slot's positions below `floor` (a row's `trim_floor`) that it still holds, but a pinned
        range: what lies below and above it goes, the range and `held_from` at its start stay."""
        lo, hi = self.pinned.get(slot, (floor, floor))
        if lo >= floor:
            lo = hi = floor
        if lo > self.held_from[slot]:
            self.let_go(slot, self.held_from[slot], lo)
            self.held_from[slot] = lo
        above = max(hi, self._above_pin.get(slot, hi))  # above the range, let go of up to here already
        if floor > above:
            self.let_go(slot, above, floor)
            self._above_pin[slot] = floor

    def reset(self, slot: int) -> None:
        """Zero the slot, handing its pages back where it can. Correctness does not need it (attention reads
        only positions already written)."""
        for name, tensor in self.parts.items():
            if not release(self._pages[name], tensor[slot]):
                tensor[slot].zero_()
        self.held_from[slot] = self.ctx

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.parts.values())


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
        kv_dtype: str | None = None,
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
            i: LayerKV(
                num_slots, config.num_kv_heads, ctx, config.head_dim, dtype, device, config.sliding_window, kv_dtype
            )
            for i in layer_ids
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

    def pin(self, slot: int, lo: int, hi: int) -> None:
        """Keep the slot's positions [lo, hi) through its trims until `unpin` (a shared prefix's window, stored
        once the read has written it)."""
        if not 0 <= lo < hi <= self.ctx:
            raise ValueError(f"cannot pin positions [{lo}, {hi}) of a {self.ctx}-position cache")
        for layer in self.layers.values():
            layer.pinned[slot] = (lo, hi)
            layer._above_pin.pop(slot, None)

    def unpin(self, slot: int) -> None:
        """The pinned range goes with the slot's next trim."""
        for layer in self.layers.values():
            layer.pinned.pop(slot, None)
            layer._above_pin.pop(slot, None)

    def trim(self, rows: Iterable) -> None:
        """Before a forward of `rows` (model/rows.Row: slot, first): each layer lets go of what they leave behind."""
        trim_rows(self.layers.values(), rows)

    def save(self, slot: int, tokens: int, first: int = 0) -> SavedPrefix:
        """Host copies of the slot's positions [first, tokens) in every layer held, from `first` or the lowest
        position any layer still holds, whichever is higher (the prompt cache's store; the slot is untouched).
        A window checkpoint passes first = tokens - W + 1: all a request keeping `tokens` reads."""
        if not 0 < tokens <= self.ctx or not 0 <= first < tokens:
            raise ValueError(f"cannot save positions [{first}, {tokens}) of a {self.ctx}-position cache")
        first = max(first, min([tokens, *(layer.held_from[slot] for layer in self.layers.values())]))
        return SavedPrefix(
            first,
            tokens,
            {
                i: tuple(t[slot, :, first:tokens].to("cpu", copy=True) for t in layer.parts.values())
                for i, layer in self.layers.items()
            },
        )

    def restore(self, saved: SavedPrefix, slot: int, tokens: int) -> None:
        """Write positions [saved.first, tokens) of `save`'s copy back into `slot` (any slot), every layer
        held; the slot lets go of what it held below them."""
        if set(saved.layers) != set(self.layers):
            raise ValueError(f"saved layers {sorted(saved.layers)} are not this cache's {sorted(self.layers)}")
        if not 0 < tokens <= saved.tokens:
            raise ValueError(f"cannot restore {tokens} positions from a copy of {saved.tokens}")
        first = min(saved.first, tokens)
        for i, copies in saved.layers.items():
            layer = self.layers[i]
            if len(copies) != len(layer.parts):
                raise ValueError(
                    f"saved layer {i} holds {len(copies)} tensors; kv {layer.format.name} has {len(layer.parts)}"
                )
            if layer.held_from[slot] < first:
                layer.let_go(slot, layer.held_from[slot], first)
            for tensor, copy in zip(layer.parts.values(), copies):
                tensor[slot, :, first:tokens].copy_(copy[:, : tokens - first])
            layer.held_from[slot] = first

    def free(self) -> None:
        """Drop the tensors (device memory goes back to the allocator); the cache is unusable afterwards."""
        self.layers = {}

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())

    def committed_bytes(self) -> int | None:
        """What the OS holds of this cache now (`committed_bytes`); None off the CPU or without smaps."""
        tensors = [t for layer in self.layers.values() for t in layer.parts.values()]
        return committed_bytes(tensors) if all(t.device.type == "cpu" for t in tensors) else None


def trim_rows(layers: Iterable[LayerKV], rows: Iterable) -> None:
    """`KVCache.trim` over any layers (the whole decode's, every stage's at once)."""
    layers = [layer for layer in layers if layer.window is not None]
    if not layers:
        return
    window = layers[0].window  # every layer's (model/config.py: windows are supported where all layers have one)
    for row in rows:
        floor = trim_floor(row.first, window)
        if floor > 0 and 0 <= row.slot < layers[0].num_slots:  # a bad slot is the forward's error (`check`)
            for layer in layers:
                layer.trim(row.slot, floor)
