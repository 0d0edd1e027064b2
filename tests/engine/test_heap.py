"""hand_back returns the C heap's free memory to the OS (glibc), the start-up's freed memory at health."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import pytest

from strata_engine.heap import hand_back


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_memory_goes_back_to_the_os():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    blocks = [libc.malloc(4000) for _ in range(40_000)]  # 160 MB below the mmap threshold: the heap's own
    for block in blocks:
        libc.memset(block, 1, 4000)
    for block in blocks[:-1]:  # the last stays, so glibc cannot shrink the heap's top by itself
        libc.free(block)
    before = _rss_kib()
    assert hand_back()
    after = _rss_kib()
    libc.free(blocks[-1])
    assert before - after > 100_000, (before, after)  # KiB: most of the 160 MB
