"""Which path serves each native op on this machine: the op or the ATen calls it replaces, the faster one.

Contract: `install(model)` sets the model's hooks to the native ops (`Attention.chunk_attention`,
`.decode_attention`, `.kv_codec`, `MoE.routed_experts`), each asking at every call whether its op serves (its
switch, the path chosen here, this machine's kept verdict), and builds or loads the ops the model takes; a model
never installed runs ATen's paths. `choose(model, batch, threads, decode, kv_dtype)` installs, then decides the
serving path (build.serve) of each op the model uses: chunk attention and routed experts; with `decode` the
compiled step's decode attention and decode experts; with a q8 or k8v4 `kv_dtype` the quantized decode attention
and the kv codec. It returns per op its path and why. A switch at 0 or 1 (kernel_switches) decides without
measuring; auto (the default) races the op against its ATen path on the model's shapes at the engine's thread
count, A/B/B/A, and keeps the faster by the least time of each (the op on a tie). The verdict is kept per machine
(`kernel-verdicts.json` in the cache folder), keyed by the CPU's flags, torch, the op's source and its -march:
later starts read it, and every process on the machine serves the same path (the first verdict written wins).
"""

from __future__ import annotations

import fcntl
import json
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from ...kernel_switches import kernel_mode, native_march
from ...model.attention import attend_row, cached_row, decode_span
from ...model.kv_cache import LayerKV
from ...model.rows import Row
from ...model.transformer import Attention, MoE
from . import build, chunk_attention, decode_attention, decode_experts, kv_codec, quant_decode_attention, routed_experts
from .prebuild import build_missing

ROUNDS = 9  # alternating samples per arm; the fastest of each counts (load from elsewhere only adds time)
RACE_CHUNK = 256  # prompt tokens a raced chunk (and rows of the experts' race)
SAMPLE_S = 0.004  # a sample is the mean of as many calls as take about this long


def time_calls(arm: str, fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of `calls` calls of fn (`arm` names the path: a test fakes the clock through it)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def race(native: Callable[[], object], aten: Callable[[], object]) -> tuple[float, float]:
    """The fastest sample's seconds per call of each arm, samples alternating A, B, B, A, ... after one
    warm-up each: another process's load only adds time, so the least time is the op's own."""
    native(), aten()
    calls = {
        arm: max(1, int(SAMPLE_S / max(time_calls(arm, fn, 1), 1e-7)))
        for arm, fn in (("native", native), ("aten", aten))
    }
    samples: dict[str, list[float]] = {"native": [], "aten": []}
    arms = [("native", native), ("aten", aten)]
    for i in range(ROUNDS):
        for arm, fn in arms if i % 2 == 0 else arms[::-1]:
            samples[arm].append(time_calls(arm, fn, calls[arm]))
    return min(samples["native"]), min(samples["aten"])


@contextmanager
def _serving(name: str, path: str):
    before = build.serving(name)
    build.serve(name, path)
    try:
        yield
    finally:
        build.serve(name, before)


def _chunk_arms(model, chunk: int, name: str):
    """The chunk op against the flash paths: a prompt chunk at position 0 and one past the window."""
    c = model.config
    window = c.sliding_window
    g = torch.Generator().manual_seed(0)
    arms = []
    for start in (0, max(window or 0, 2 * chunk)):
        length = start + chunk
        q = torch.randn(chunk, c.num_heads, c.head_dim, generator=g).transpose(0, 1)[None]
        keys, values = (torch.randn(1, c.num_kv_heads, length, c.head_dim, generator=g) for _ in range(2))
        positions = torch.arange(start, length)
        arms.append(
            (
                lambda q=q, k=keys, v=values, p=positions: attend_row(
                    q, k, v, p, True, window, chunk=chunk_attention.attend_chunk
                ),
                lambda q=q, k=keys, v=values, p=positions: attend_row(q, k, v, p, True, window),
            )
        )
    return arms, f"a {chunk}-token chunk at 0 and at {max(window or 0, 2 * chunk)}"


def _expert_arms(model, chunk: int, name: str):
    """The routed experts in one call against the Python loop, on the first MoE layer, a chunk's rows."""
    moe = next((layer.mlp for layer in model.layers if isinstance(getattr(layer, "mlp", None), MoE)), None)
    if moe is None:
        return [], ""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(chunk, model.config.hidden_size, generator=g)
    experts = torch.stack([torch.randperm(moe.num_experts, generator=g)[: moe.top_k] for _ in range(chunk)])
    weights = torch.rand(chunk, moe.top_k, generator=g)

    def aten():
        with _serving(name, "aten"):
            return moe._routed(x, weights, experts)

    return [(lambda: moe._routed(x, weights, experts), aten)], f"{chunk} rows, top-{moe.top_k} of {moe.num_experts}"


def _decode_arms(model, batch: int, name: str):
    """The decode op against its per-row ATen calls: the batch's rows padded to 8, past the window and early."""
    from .. import step_ops

    c = model.config
    window = -1 if c.sliding_window is None else int(c.sliding_window)
    rows = min(batch, 8)
    g = torch.Generator().manual_seed(0)
    op = decode_attention.native_decode_attention()
    arms = []
    for base in (100, max(window, 0) + 100):
        at = [base + 3 * i for i in range(rows)] + [0] * (8 - rows)
        caches = [torch.randn(rows, c.num_kv_heads, base + 3 * rows + 8, c.head_dim, generator=g) for _ in range(2)]
        q, k, v = (torch.randn(8, h, c.head_dim, generator=g) for h in (c.num_heads, c.num_kv_heads, c.num_kv_heads))
        slots, positions = torch.tensor(list(range(rows)) + [-1] * (8 - rows)), torch.tensor(at)
        args = (q, k, v, *caches, slots, positions, window)
        arms.append((lambda a=args: op(*a), lambda a=args: step_ops.decode_attention(*a, native=False)))
    return arms, f"{rows} decode rows at ~100 and ~{max(window, 0) + 100}"


def _decode_expert_arms(model, batch: int, name: str):
    """The decode experts op against the every-expert MoE the compiled step runs without it (ATen's GEMMs, as with
    `STRATA_COMPILED_GEMMS=aten`), on the first MoE layer: one row and the batch's rows (up to 8), each choosing its
    top-k at random."""
    moe = next((layer.mlp for layer in model.layers if isinstance(getattr(layer, "mlp", None), MoE)), None)
    if moe is None:
        return [], ""
    op = decode_experts.native_decode_experts()
    # the op reads the experts as the compiled step holds them: column-major, where the runtime pads rows
    gate_up, down = (t.detach().transpose(1, 2).contiguous().transpose(1, 2) for t in (moe.gate_up_proj, moe.down_proj))
    g = torch.Generator().manual_seed(0)
    arms = []
    for rows in sorted({1, min(batch, 8)}):
        x = torch.randn(rows, model.config.hidden_size, generator=g)
        experts = torch.stack([torch.randperm(moe.num_experts, generator=g)[: moe.top_k] for _ in range(rows)])
        weights = torch.rand(rows, moe.top_k, generator=g)
        slots = torch.arange(rows)
        arms.append(
            (
                lambda x=x, w=weights, e=experts, s=slots: op(x, w, e, gate_up, down, s),
                lambda x=x, w=weights, e=experts: moe._every_expert(x, w, e),
            )
        )
    return arms, f"1 and {min(batch, 8)} decode rows, top-{moe.top_k} of {moe.num_experts}"


def _quant_decode_arms(model, batch: int, name: str):
    """The quantized decode op against write_row, the dequantized window and ATen's attention, q8 and k8v4
    each (one verdict for both): the batch's rows up to 8, each writing its key and value and attending,
    early and past the window."""
    c = model.config
    window, rows = c.sliding_window, min(batch, 8)
    past = (window or 1948) + 100
    g = torch.Generator().manual_seed(0)
    arms = []
    for fmt in ("q8", "k8v4"):
        for base in (100, past):
            kv = LayerKV(rows, c.num_kv_heads, base + 3 * rows + 1, c.head_dim, torch.float32, "cpu", window, fmt)
            at = [Row(s, s, 1, base + 3 * s, base + 3 * s, True) for s in range(rows)]
            for row in at:
                keys, values = (torch.randn(row.last, c.num_kv_heads, c.head_dim, generator=g) for _ in range(2))
                kv.write_row(row.slot, 0, keys, values)
            q = torch.randn(rows, c.num_heads, c.head_dim, generator=g)
            k, v = (torch.randn(rows, c.num_kv_heads, c.head_dim, generator=g) for _ in range(2))
            spans = [decode_span(row, window) for row in at]

            def aten(q=q, k=k, v=v, kv=kv, at=at):
                for i, row in enumerate(at):
                    kv.write_row(row.slot, row.first, k[i : i + 1], v[i : i + 1])
                return [cached_row(q[i : i + 1], torch.tensor([r.last]), kv, r, window, None) for i, r in enumerate(at)]

            arms.append(
                (lambda q=q, k=k, v=v, kv=kv, s=spans: quant_decode_attention.attend_decode(q, k, v, kv, s), aten)
            )
    return arms, f"{rows} decode rows of q8 and k8v4 at ~100 and ~{past}"


def _codec_arms(model, chunk: int, name: str):
    """The native codec against kv_format.py's, q8 and k8v4 each (one verdict for both): a prompt chunk's keys
    and values stored past the window, then the window its queries see read back as float32."""
    c = model.config
    window = c.sliding_window or 1024
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(chunk, c.num_kv_heads, c.head_dim, generator=g) for _ in "kv")
    arms = []
    for fmt in ("q8", "k8v4"):
        kv = LayerKV(1, c.num_kv_heads, window + chunk, c.head_dim, torch.float32, "cpu", None, fmt)
        kv.write_row(0, 0, *(torch.randn(window, c.num_kv_heads, c.head_dim, generator=g) for _ in "kv"))

        def cycle(codec, kv=kv):
            kv.write_row(0, window, k, v, None, codec)
            return kv.read(0, 0, window + chunk, codec)

        arms.append((lambda cycle=cycle: cycle(kv_codec.CODEC), lambda cycle=cycle: cycle(None)))
    return arms, f"a {chunk}-token chunk of q8 and k8v4 written, its {window + chunk}-position window read"


# label -> (switch, op name in build.py, accessor, source, arms)
OPS = {
    "chunk attention": (
        chunk_attention.ENV,
        "strata_chunk_attention",
        chunk_attention.native_chunk_attention,
        chunk_attention._SOURCE,
        _chunk_arms,
    ),
    "routed experts": (
        routed_experts.ENV,
        "strata_routed_experts",
        routed_experts.native_routed_experts,
        routed_experts._SOURCE,
        _expert_arms,
    ),
    "decode attention": (
        decode_attention.ENV,
        "strata_decode_attention",
        decode_attention.native_decode_attention,
        decode_attention._SOURCE,
        _decode_arms,
    ),
    "decode experts": (
        decode_experts.ENV,
        decode_experts.NAME,
        decode_experts.native_decode_experts,
        decode_experts._SOURCE,
        _decode_expert_arms,
    ),
    "quantized decode attention": (
        quant_decode_attention.ENV,
        "strata_quant_decode_attention",
        quant_decode_attention.native_quant_decode_attention,
        quant_decode_attention._SOURCE,
        _quant_decode_arms,
    ),
    "kv codec": (
        kv_codec.ENV,
        "strata_kv_codec",
        kv_codec.native_kv_codec,
        kv_codec._SOURCE,
        _codec_arms,
    ),
}


def install(model) -> None:
    """Set every attention's and MoE layer's native hook (the module's contract), and build or load the ops
    this model takes (once per machine, ~30 s: said on stderr) here rather than in its first read."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.chunk_attention = chunk_attention.attend_chunk
            module.decode_attention = quant_decode_attention.attend_decode
            module.kv_codec = kv_codec.CODEC
        elif isinstance(module, MoE):
            module.routed_experts = routed_experts.run_routed
    first = next(model.parameters())
    if first.device.type == "cpu" and first.dtype == torch.float32 and model.config.head_dim in (32, 64, 128):
        chunk_attention.native_chunk_attention()
    if first.device.type == "cpu" and getattr(model.config, "num_experts", 0):
        routed_experts.native_routed_experts()


def wanted(model, decode: bool, kv_dtype: str | None) -> list[str]:
    """The labels of the ops this model takes: the decode ops only where `decode` (the compiled step's decode
    op) or a quantized `kv_dtype` asks for them, the attention ops for the head sizes they are written for."""
    cpu_f32 = next(model.parameters()).dtype == torch.float32 and next(model.parameters()).device.type == "cpu"
    heads = model.config.head_dim in (32, 64, 128)
    takes = {
        "chunk attention": cpu_f32 and heads,
        "routed experts": bool(getattr(model.config, "num_experts", 0)),
        "decode attention": decode,
        "decode experts": decode and cpu_f32 and bool(getattr(model.config, "num_experts", 0)),
        "quantized decode attention": cpu_f32 and heads and kv_dtype in ("q8", "k8v4"),
        "kv codec": cpu_f32 and kv_dtype in ("q8", "k8v4"),
    }
    return [label for label in OPS if takes[label]]


def choose(model, batch: int, threads: int | None, decode: bool, kv_dtype: str | None = None) -> dict[str, dict]:
    """Install the model's hooks, then decide the serving path of each op the model uses (see the module's
    contract): per op label {"path": "native" | "aten", "why": ..., "march": ..., and where measured native_ms /
    aten_ms}. The compiled step's decode op reads a float32 cache: with another KV format (`kv_dtype`) ATen's path
    serves it; the chunk op reads the float32 window `LayerKV.read` returns, whatever the format."""
    labels = wanted(model, decode, kv_dtype)
    quantized = kv_dtype not in (None, "f32")  # then ATen's path serves the float32 decode op, unbuilt
    build_missing([OPS[label][:4] for label in labels if not (quantized and label == "decode attention")])
    install(model)
    chosen: dict[str, dict] = {}
    for label in labels:
        env, name, accessor, source, arms_of = OPS[label]
        build.serve(name, "native")  # the op itself while it is built and raced
        mode = kernel_mode(env)
        if quantized and label == "decode attention":
            verdict = {"path": "aten", "why": f"kv {kv_dtype}: the op reads float32 caches"}
        elif mode == "aten":
            verdict = {"path": "aten", "why": f"{env}=0"}
        elif accessor() is None:
            verdict = {"path": "aten", "why": "the op did not build here (stderr says why)"}
        elif mode == "native":
            verdict = {"path": "native", "why": f"{env}=1"}
        else:
            # raced on the default layout's 256-token chunks whatever this engine's chunk: one verdict a machine
            verdict = _verdict(label, name, source, arms_of, model, batch if "decode" in label else RACE_CHUNK, threads)
        build.serve(name, verdict["path"])
        chosen[label] = {**verdict, "march": native_march()}
        print(f"strata-engine: {label}: {verdict['path']} serves ({verdict['why']})", file=sys.stderr)
    return chosen


def _verdict(label: str, name: str, source: str, arms_of, model, size: int, threads: int | None) -> dict:
    key = build.verdict_key(name, source, native_march())  # raced on this model's shapes, kept for the machine
    cached = build.read_verdicts().get(key)
    if cached is not None:
        return {**cached, "why": f"{cached['why']}; measured earlier on this machine"}
    arms, shapes = arms_of(model, size, name)  # built on a miss only: some arms copy a layer's weights
    threads = threads or torch.get_num_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            timed = [race(native, aten) for native, aten in arms]
    finally:
        torch.set_num_threads(before)
    native_s, aten_s = sum(t[0] for t in timed), sum(t[1] for t in timed)
    path = "native" if native_s <= aten_s else "aten"
    verdict = {
        "path": path,
        "native_ms": round(native_s * 1e3, 3),
        "aten_ms": round(aten_s * 1e3, 3),
        "why": f"the op took {native_s / aten_s:.2f}x ATen's time ({shapes}, {threads} thread(s))",
    }
    return _cache_write(key, verdict)


def _cache_write(key: str, verdict: dict) -> dict:
    """Keep `verdict` unless another process wrote one for `key` first; returns the one that stands."""
    path = build.verdicts_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            table = build.read_verdicts()
            if key in table:
                return table[key]
            table[key] = verdict
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
            tmp.replace(path)
    except OSError as exc:  # a read-only home: the verdict still serves this process
        print(f"strata-engine: the kernel verdict was not cached ({exc})", file=sys.stderr)
    return verdict
