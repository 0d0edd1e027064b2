"""The KV cache's memory on the CPU: anonymous mappings whose pages the OS commits as they are first written.

Contract: `lazy_zeros(shape, dtype, device)` is a zero tensor (on the CPU in a private anonymous mapping, which it
returns beside it; elsewhere torch.zeros and None); `release(pages, view)` hands the whole pages inside a view back
(they read as zero again); `committed_bytes(tensors)` is what the OS holds of them now (Linux's pagemap). So a
slot's resident memory follows the positions it wrote, not the context it reserved (model/kv_cache.py).
"""

from __future__ import annotations

import math
import mmap
from typing import Iterable

import torch


def lazy_zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor, mmap.mmap | None]:
    """Zeros of `shape`; on CPU in an anonymous mapping whose pages are committed when first written (and
    the mapping, for `release`), elsewhere torch.zeros (and None)."""
    count = math.prod(shape)
    if torch.device(device).type != "cpu" or count == 0 or not hasattr(mmap, "MAP_PRIVATE"):
        return torch.zeros(shape, dtype=dtype, device=device), None
    pages = mmap.mmap(-1, count * dtype.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(pages, dtype=dtype).view(shape), pages  # the tensor keeps the mapping alive


def committed_bytes(tensors: Iterable[torch.Tensor]) -> int | None:
    """The bytes of these CPU tensors' pages the OS holds now (Linux's /proc/self/pagemap: a page present or
    swapped): what it committed, not what was reserved. None where pagemap cannot be read."""
    page, total = mmap.PAGESIZE, 0
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            for t in tensors:
                first = t.data_ptr() // page
                count = (t.data_ptr() + t.numel() * t.element_size() - 1) // page - first + 1
                pagemap.seek(first * 8)
                entries = torch.frombuffer(bytearray(pagemap.read(count * 8)), dtype=torch.int64)
                total += int(((entries < 0) | (entries & (1 << 62) != 0)).sum()) * page  # bit 63 present, 62 swapped
    except (OSError, ValueError):
        return None
    return total


def release(pages: mmap.mmap | None, view: torch.Tensor) -> bool:
    """Hand the whole pages inside contiguous `view` back to the OS (they read as zero again); True when that
    was all of the view, False where some or all of it stays (no mapping: CUDA; no madvise; a part page)."""
    if pages is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    start = view.storage_offset() * view.element_size()
    end = start + view.numel() * view.element_size()
    first_page, end_page = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if end_page > first_page:
        pages.madvise(mmap.MADV_DONTNEED, first_page, end_page - first_page)
    return first_page == start and end_page == end
