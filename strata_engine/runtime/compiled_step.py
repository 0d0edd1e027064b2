"""The compiled decode step: one stage's layers under torch.compile, for micro-batches of decode rows only.

Contract: `CompiledDecode(model, layers, cache, is_first, is_last, row_tile, num_slots, threads, device, gemms)`
compiles in its constructor (the warm-up, before the stage says it is ready) one graph per row bucket a decode
micro-batch of 1..num_slots rows can fall in: the rows padded to the row tile (CPU float32), else to a power of
two. `run(part)` runs a part of decode rows (one token each) through its graph and sets `part.hidden` /
`part.logits` as `stage_forward` would; for any other part it returns False and does nothing (the caller runs
it eagerly). `graphs` and `compile_s` say what the warm-up built.

The graph is the blocks' own modules with static shapes, applied from outside the model as gpt-fast does; each
layer's attention with its KV writes is one opaque op (`strata::decode_attention`, step_ops.py), and so is its
MoE where the native decode experts serve (`strata::decode_experts`: each row through its chosen experts), else
every expert runs on every row, padding rows weighted 0. A row's logits do not depend on the rows beside it
(with `aten` GEMMs), but are not bitwise the eager step's, so the mixed read (decode rows in eager forwards)
makes no batch-invariance claim with it (backends.build_torch).

GEMMs (`RuntimeConfig.gemms`, `STRATA_COMPILED_GEMMS`): `aten` calls MKL through ATen (the plain layouts');
`template` (the fastest layout's) compiles inductor's C++ GEMM template over frozen weights (no autotuning; the
experts' down projections as one GEMM), faster at a few rows for a longer cold compile and a frozen weight copy
per step; its kernels round a row by its place in the micro-batch, so no batch-invariance claim. Warm starts load
the graphs from inductor's cache (compile_cache.py). Measured: docs/measurements/compiled-step.md,
compiled-gemms.md, decode-experts.md.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types
from typing import Sequence

import torch
import torch.nn.functional as F

from ..model.transformer import MoE
from .compile_cache import compile_cache_tag, inductor_options, tag_every_compile
from . import step_ops  # noqa: F401  (registers the step's ops, torch.ops.strata.*)
from .native.decode_attention import native_decode_attention
from .native.decode_experts import native_decode_experts
from .invariance import padded_rows
from ..model.kv_cache import KVCache, trim_rows
from ..runtime_config import RuntimeConfig
from .stage_plan import StagePlan


# Guards on tensors only (shapes, strides, dtypes: which bucket, which weight layout). Dynamo's default also
# guards every module attribute and global the step reads, ~0.1 ms a call here (docs/MODEL.md); nothing of that
# changes after the warm-up (each instance compiles its own code object for its own fixed model, cache and
# stage), and a tensor that changes layout still recompiles.
GUARDS = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}


def _own_code(method):
    """The bound method over a copy of its code object: dynamo keeps graphs and counts recompiles per code
    object, so each instance's graphs (its buckets) are its own and never crowd another instance's out."""
    func = method.__func__
    code = func.__code__.replace(co_name=f"{func.__code__.co_name}_{id(method.__self__):x}")
    return types.MethodType(
        types.FunctionType(code, func.__globals__, code.co_name, func.__defaults__, func.__closure__), method.__self__
    )


def recompiles_allowed():
    """Every bucket is a recompile of one instance's `_forward`, and the set of graphs is bounded and known
    (one per bucket, compiled by the warm-up; a weight layout switched back and forth, as in bench_model, adds
    its own): dynamo's recompile limit is lifted around the warm-up only, a context rather than a process-wide
    setting, so other compiled code keeps its limit. A caller that changes what the graphs
    were compiled for (bench_model switching weight layouts) holds it, through `CompiledDecode.compiling`,
    around its own calls; a step costs ~50 us more inside it, so the engine's steps run outside."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return config.patch(**{name: max(getattr(config, name), 1 << 16)})


def buckets(num_slots: int, row_tile: int) -> dict[int, int]:
    """rows -> the padded row count of its graph: a multiple of the row tile, else a power of two."""
    if row_tile > 1:
        return {rows: padded_rows(rows, row_tile) for rows in range(1, num_slots + 1)}
    return {rows: 1 << (rows - 1).bit_length() for rows in range(1, num_slots + 1)}


class CompiledDecode:
    def __init__(
        self,
        model: torch.nn.Module,
        layers: range,
        cache: KVCache,
        is_first: bool,
        is_last: bool,
        row_tile: int,
        num_slots: int,
        threads: int | None = None,
        device: str = "cpu",
        gemms: str = "aten",
    ):
        if not all(cache.layers[i].views for i in layers):
            raise ValueError("the compiled step reads the KV cache in the model's dtype; use --layout plain")
        self.model, self.layers, self.cache = model, list(layers), cache
        self.gemms = gemms
        self.cache_tag: str | None = None  # the inductor cache's tag for these weights: set by the first `compiling`
        self.is_first, self.is_last, self.device = is_first, is_last, device
        self.dtype = next(model.parameters()).dtype
        self.window = -1 if model.config.sliding_window is None else int(model.config.sliding_window)
        self.bucket_of = buckets(num_slots, row_tile)
        self.graphs = len(set(self.bucket_of.values()))
        self._step = torch.compile(_own_code(self._forward), fullgraph=True, dynamic=False, options=GUARDS)
        if device == "cpu" and self.dtype == torch.float32:
            native_decode_attention()  # built or loaded here, in the warm-up, not on the first request
        # each decode row through its chosen experts only, where the native op serves (chosen before the graphs)
        fits = device == "cpu" and self.dtype == torch.float32 and _experts_fit(model)
        self.routed = fits and native_decode_experts() is not None
        self.compile_s = self._warm_up(threads)

    def _forward(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """x: tokens [N] (first stage) or hidden [N, D]; slots [N], -1 for a padding row."""
        weight = (slots >= 0).to(x.device, self.dtype)[:, None]  # [N, 1]: 1 for a row, 0 for padding
        h = self.model.embed(x) if self.is_first else x
        for i in self.layers:
            block, kv = self.model.layers[i], self.cache.layers[i]
            attn = block.self_attn
            q, k, v = attn.project(block.input_layernorm(h), positions)
            o = torch.ops.strata.decode_attention(q, k, v, kv.k, kv.v, slots, positions, self.window)
            h = h + attn.o_proj(o.reshape(o.shape[0], -1))
            x = block.post_attention_layernorm(h)
            if isinstance(block.mlp, MoE):
                h = h + _moe(block.mlp, x, weight, self.gemms == "template", slots if self.routed else None)
            else:
                h = h + block.mlp(x)
        return self.model.head(h) if self.is_last else h

    def _warm_up(self, threads: int | None) -> float:
        """Compile every bucket now (rows at position 0 of the first slots: attention reads only positions a
        request wrote itself, so these writes are never seen), at the stage's thread count: inductor's CPU
        kernels keep the count they were compiled with."""
        previous = torch.get_num_threads()
        start = time.perf_counter()
        _probed.wait()  # the vector ISA probe begun by `probe_vec_isa`, if any, done first: it runs once
        try:
            if threads:
                torch.set_num_threads(threads)
            largest = {bucket: rows for rows, bucket in self.bucket_of.items()}
            with torch.inference_mode(), self.compiling():
                for rows in largest.values():
                    self._call(
                        [(slot, 0) for slot in range(rows)],
                        torch.zeros(rows, dtype=torch.long),
                        torch.zeros(
                            self.bucket_of[rows], self.model.config.hidden_size, device=self.device, dtype=self.dtype
                        ),
                    )
            for slot in range(max(largest.values())):  # the pages those writes committed go back to the OS
                for i in self.layers:
                    self.cache.layers[i].reset(slot)
        finally:
            torch.set_num_threads(previous)
        return time.perf_counter() - start

    def compiling(self) -> contextlib.ExitStack:
        """The recompile limit lifted and this step's inductor options (its GEMMs): what the warm-up holds, and what
        a caller that may recompile the step (bench_model switching weight layouts) holds around its calls, so a
        recompile builds the same kind of graph. The first (the warm-up's) tags the inductor cache's entries: every
        compile of this process by the CPU, this step's by its weights too (runtime/compile_cache.py)."""
        if self.cache_tag is None:
            tag_every_compile()
            self.cache_tag = compile_cache_tag(self.model, self.gemms)
        stack = contextlib.ExitStack()
        stack.enter_context(recompiles_allowed())
        stack.enter_context(inductor_options(self.gemms, self.cache_tag))
        return stack

    def run(self, part) -> bool:
        rows = part.rows.rows
        if part.rows.real != len(rows) or len(rows) not in self.bucket_of or not part.want_logits:
            return False  # not decode rows only (or more rows than any graph): the eager forward
        bounds = [[row.slot, row.first, row.last] for row in rows]
        for i in self.layers:
            self.cache.layers[i].check(bounds)
        hidden = None if self.is_first else part.hidden
        if hidden is not None and hidden.shape[0] != self.bucket_of[len(rows)]:
            return False
        out = self._call([(row.slot, row.first) for row in rows], part.tokens, hidden)
        if self.is_last:
            part.hidden, part.logits = None, out[: len(rows)].float()
        else:
            part.hidden = out
        return True

    def _call(self, rows: list[tuple[int, int]], tokens: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        count = len(rows)
        n = self.bucket_of[count]
        slots = torch.tensor([s for s, _ in rows] + [-1] * (n - count))
        positions = torch.tensor([p for _, p in rows] + [0] * (n - count), device=self.device)
        if self.is_first:
            x = torch.cat([tokens.to(self.device), tokens.new_zeros(n - count, device=self.device)])
        else:
            x = hidden.to(self.device)
        return self._step(x, positions, slots)


def _moe(
    moe: MoE, x: torch.Tensor, weight: torch.Tensor, one_down_gemm: bool = False, slots: torch.Tensor | None = None
) -> torch.Tensor:
    """The MoE layer: with `slots`, each row through its chosen experts only (the native op; padding rows, slot
    -1, give 0); else on every expert (static shapes), padding rows weighing 0 on every expert. one_down_gemm:
    the experts' down projections as one GEMM over [rows, experts x width] (each expert's rows scaled by its
    router weight first) instead of a batched GEMM and a weighted sum."""
    _, weights, experts = moe.route(x)
    if slots is not None:
        out = torch.ops.strata.decode_experts(x, weights, experts, moe.gate_up_proj, moe.down_proj, slots)
    elif one_down_gemm:
        out = _every_expert_one_down(moe, x, weights * weight, experts)
    else:
        out = moe._every_expert(x, weights * weight, experts)
    if moe.shared_expert is not None:
        out = out + torch.sigmoid(moe.shared_expert_gate(x)) * moe.shared_expert(x)
    return out


def _every_expert_one_down(moe: MoE, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    hidden, dense = moe.every_expert_hidden(x, weights, experts)
    routed = hidden * dense[..., None]  # [N, E, I], unchosen experts' rows 0
    return F.linear(
        routed.reshape(x.shape[0], -1), moe.down_proj.transpose(0, 1).reshape(x.shape[1], -1)
    )  # [N, E*I] @ [E*I, D]


def _experts_fit(model: torch.nn.Module) -> bool:
    """Whether the model has MoE layers of the sizes the native decode experts take (multiples of 16)."""
    c = model.config
    return bool(getattr(c, "num_experts", 0)) and c.hidden_size % 16 == 0 and c.moe_intermediate_size % 16 == 0


_probed = threading.Event()
_probed.set()  # no probe running until `probe_vec_isa` starts one


def probe_vec_isa() -> None:
    """Start inductor's check of this CPU's vector ISA (a g++ build, kept, and a child Python per ISA that loads
    it: ~1.5-3.5 s of every process's first compile, mostly waiting on children) on a thread, so it runs while
    the engine loads the model and its native ops; the first step's warm-up waits for it."""
    if not _probed.is_set():
        return
    _probed.clear()

    def probe():
        try:
            from torch._inductor.cpu_vec_isa import valid_vec_isa_list

            valid_vec_isa_list()
        except Exception:  # the warm-up's own compile asks again and says what failed
            pass
        finally:
            _probed.set()

    threading.Thread(target=probe, name="strata-vec-isa-probe", daemon=True).start()


def compiled_stage(
    model: torch.nn.Module,
    plan: StagePlan,
    cache: KVCache,
    is_first: bool,
    is_last: bool,
    num_slots: int,
    runtime: RuntimeConfig,
) -> CompiledDecode:
    """One pipeline stage's (runtime/stage_plan.StagePlan) compiled step, warmed up, at the runtime's row tile
    (resolved by then), threads and GEMMs."""
    tile, threads, gemms = runtime.row_tile, runtime.threads, runtime.gemms
    return CompiledDecode(model, plan.layers, cache, is_first, is_last, tile, num_slots, threads, plan.device, gemms)


class _AllLayers:
    """Every stage's KV layers as one cache, for the whole decode's compiled step."""

    def __init__(self, caches: Sequence[KVCache]):
        self.layers = {i: layer for cache in caches for i, layer in cache.layers.items()}

    def trim(self, rows) -> None:
        trim_rows(self.layers.values(), rows)


def whole_decode(
    model: torch.nn.Module,
    stages: Sequence[StagePlan],
    caches: Sequence[KVCache],
    num_slots: int,
    runtime: RuntimeConfig,
) -> CompiledDecode:
    """The whole decode's step (runtime/pipeline.py): every stage's layers, on the CPU, as one compiled step over
    every stage's KV cache, warmed up like a stage's."""
    every = StagePlan(0, "cpu", stages[0].layer_start, stages[-1].layer_end)
    return compiled_stage(model, every, _AllLayers(caches), True, True, num_slots, runtime)


def compile_info(built, gemms: str = "aten") -> dict | None:
    """What the stages' warm-ups built, for /v1/engine: (graphs, seconds) per stage, summed, and their GEMMs;
    None for none."""
    built = list(built)
    if not built:
        return None
    return {"graphs": int(sum(g for g, _ in built)), "compile_s": round(sum(s for _, s in built), 2), "gemms": gemms}
