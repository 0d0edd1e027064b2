"""Hand the C heap's free memory back to the OS once start-up is done.

Start-up (loading, the start-up probes, compiling the decode step) allocates and frees hundreds of MB
through glibc's malloc, which keeps freed memory in its arenas: resident, never used again by a server that
only decodes afterwards. `hand_back` collects Python's garbage and asks glibc to return what is free
(`malloc_trim`); elsewhere (another C library) it does nothing. On the default server it took the resident
size at health from 569 MB to 486 MB (docs/measurements/kv-memory.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def hand_back() -> bool:
    """True where glibc handed memory back, False where it had none to give or is not the C library here."""
    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return bool(trim(0))
