"""MKL's conditional numerical reproducibility, asked for before the first GEMM of a model this package builds.

In MKL's `AUTO,STRICT` mode a GEMM's bits do not depend on the thread count, so one engine layout gives the
bits of another (runtime/thread_probe.py measures what holds at start). MKL fixes its mode at its first call,
so `pin` asks through MKL's own call (`mkl_cbwr_set`, which torch's x86 CPU library exports) when a model is
loaded, not through the process environment: importing the package changes nothing. A user's `MKL_CBWR`
(other than OFF, MKL's default) wins. Where MKL already ran in this process, its mode stays and `pin` says
so; the start-up probes then measure what holds.
"""

from __future__ import annotations

import ctypes
import os
import threading

AUTO_STRICT = 2 | 0x10000  # MKL_CBWR_AUTO | MKL_CBWR_STRICT
_OFF = 1  # MKL_CBWR_OFF: MKL's default mode
_ALL = -1  # MKL_CBWR_ALL: the whole mode word, for mkl_cbwr_get
_MODE_CHANGE_FAILURE = -8  # MKL_CBWR_ERR_MODE_CHANGE_FAILURE: MKL already ran
_lock = threading.Lock()
_verdict: str | None = None


def _mkl():
    """MKL's get and set calls in torch's CPU library, or None (a torch without MKL)."""
    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get, set_ = lib.mkl_serv_cbwr_get, lib.mkl_serv_cbwr_set
    except (OSError, AttributeError):
        return None
    get.restype = set_.restype = ctypes.c_int
    get.argtypes = set_.argtypes = [ctypes.c_int]
    return get, set_


def pin() -> str:
    """Ask MKL for AUTO,STRICT once per process; returns the mode in force, in words ("AUTO,STRICT" when it holds)."""
    global _verdict
    with _lock:
        if _verdict is None:
            _verdict = _pin()
        return _verdict


def _pin() -> str:
    calls = _mkl()
    if calls is None:
        return "no MKL in this torch"
    get, set_ = calls
    mode = get(_ALL)  # MKL reads a user's MKL_CBWR here, if it has not yet
    if mode == AUTO_STRICT:
        return "AUTO,STRICT"
    if mode != _OFF:
        return f"mode {mode:#x} (the user's MKL_CBWR)"
    code = set_(AUTO_STRICT)
    if code == 0:
        return "AUTO,STRICT"
    why = "MKL ran before the model was loaded" if code == _MODE_CHANGE_FAILURE else f"mkl_cbwr_set returned {code}"
    return f"MKL's default ({why})"
