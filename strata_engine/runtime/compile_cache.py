"""The compiled step's inductor cache: the options a step compiles under, so its graphs can be cached, and the tag
that keys an entry to these weights, this CPU and ATen's vector level.

Contract: `inductor_options(gemms, tag)` is the context a step compiles in (`template`: C++ GEMM templates over
frozen weights with oneDNN off, `_onednn_off`, shared by stage threads compiling at once; else the defaults),
each with `tag` in the cache's key; `compile_cache_tag(model, gemms)` is that tag; `tag_every_compile()` keys a
step's later recompiles by the CPU too. Measured: docs/measurements/start-up.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading

import torch

from .native.build import machine_tag


def inductor_options(gemms: str, cache_tag: str = ""):
    """The inductor settings a step is compiled under: C++ GEMM templates over frozen weights, or the defaults.

    The templates' graphs go through inductor's FX graph cache on a warm start only if no mkldnn tensor is among
    the frozen graph's constants ("mkldnn tensors unpickleable"): freezing's weight-pack pass turns each linear
    into MKL's packed linear, whose packed weight is one, and the template only ever reads the original weight
    beside it. With oneDNN switched off while inductor's freezing passes register (once a process, at the first
    frozen compile), the pass is not registered: a linear stays a GEMM over a frozen weight, which inductor's
    GEMM lowering gives the same C++ template. `cache_tag` (`compile_cache_tag`) goes into the cache's key: the
    key holds a frozen weight's shape, not its values, while the template's blocked copy of it is kept by value
    in the cache entry. Either way the tag holds the CPU and ATen's vector level (`ATEN_CPU_CAPABILITY`), which
    inductor's key does not: an entry made at another level gave wrong logits or corrupted the heap."""
    stack = contextlib.ExitStack()
    if gemms != "template":
        stack.enter_context(torch.compiler.config.patch(cache_key_tag=cache_tag))
        return stack
    stack.enter_context(
        torch._inductor.config.patch(freezing=True, max_autotune=True, max_autotune_gemm_backends="CPP")
    )
    stack.enter_context(torch.compiler.config.patch(cache_key_tag=cache_tag))
    stack.enter_context(_onednn_off())
    return stack


_ONEDNN = threading.Lock()
_onednn_users = 0  # compiles inside _onednn_off now (stage threads compile at once)
_onednn_was = True


@contextlib.contextmanager
def _onednn_off():
    """oneDNN off (only its switch, not `torch.backends.mkldnn.flags`' others) around the step's compile: float32
    GEMMs on the CPU run MKL's either way. The switch is the process's: the first of overlapping compiles turns
    it off, the last puts back what it found."""
    global _onednn_users, _onednn_was
    with _ONEDNN:
        if _onednn_users == 0:
            _onednn_was = torch.backends.mkldnn.enabled
            torch.backends.mkldnn.enabled = False
        _onednn_users += 1
    try:
        yield
    finally:
        with _ONEDNN:
            _onednn_users -= 1
            if _onednn_users == 0:
                torch.backends.mkldnn.enabled = _onednn_was


def tag_every_compile() -> None:
    """The CPU's part of the tag (`cpu_tag`) for every compile in this process, where nothing else set a default:
    a step recompiled outside its warm-up (dynamo's guards fail: another thread count, another grad mode) is
    keyed by it too. Without it such a recompile at ATEN_CPU_CAPABILITY=avx2 loaded an entry made at the AVX-512
    level and gave other tokens (tests/engine/test_compiled_step.py's steps run at another thread count)."""
    if not torch.compiler.config.cache_key_tag:
        torch.compiler.config.cache_key_tag = cpu_tag()


def cpu_tag() -> str:
    """This CPU's flags and ATen's vector level: what the generated kernels are chosen for."""
    return f"strata cpu {machine_tag()} {torch.backends.cpu.get_cpu_capability()}"


def compile_cache_tag(model: torch.nn.Module, gemms: str = "template") -> str:
    """What the step's inductor cache entries are keyed by beyond inductor's own key (the graph, shapes, strides,
    dtypes, torch's source, inductor's options): this CPU's flags and ATen's vector level (the generated kernels
    and the GEMM template's blocking are chosen for them) and, for the templates, a SHA-256 of the model's
    weights (their blocked weights are kept in the entry). A changed model, CPU, level or torch never loads
    another's entry."""
    cpu = cpu_tag()
    if gemms != "template":
        return cpu
    digest = hashlib.sha256()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        t = t.detach()
        digest.update(f"{name} {tuple(t.shape)} {t.dtype}".encode())
        digest.update(t.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return f"{cpu} weights {digest.hexdigest()[:16]}"
