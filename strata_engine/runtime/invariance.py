"""Batch invariance: the row padding that makes a row's logits independent of the rows beside it.

Contract: with `row_tile` > 1 every GEMM of a stage runs on a row count rounded up to a multiple of
`row_tile` (the stage pads the call's flat tokens, `apply_row_tile` pads each MoE expert's rows), and
`invariance_holds` says whether that makes logits bitwise batch invariant on this machine: CPU, float32,
and a start-up probe of the model's own GEMM shapes at the stage's thread count passes.

Why 16 or 32: measured with torch 2.13 + MKL 2024.2 on AVX-512 (see docs/MODEL.md): a linear layer's output
row is bitwise the same for every row count M >= 16 and any position of the row, at 1, 2, 3, 4 and 8
threads, for inner sizes K <= 512; below that MKL takes small-matrix paths whose rounding differs
(M <= K/25 at one thread, and some remainders at two). Per-row reductions (RMSNorm, softmax) give equal
rows for any M, but elementwise transcendental ops (sigmoid, silu, exp, cos) run 32 floats per vector
step and the tail through a scalar path that rounds differently: qwen2_moe's shared-expert gate sigmoid
over [M, 1] moved with M = 16 against 32. Rows padded to a multiple of 16 keep an op on the vector path
when its row width is even (16 x even = whole steps); a model with an odd width needs 32. CUDA GEMMs pick split-K and tile shapes by problem
size, so no padding makes them invariant there; that needs fixed-tile kernels (see docs/MODEL.md).
"""
from __future__ import annotations

import torch

from ..model.transformer import MoE
from .weight_layout import gemm_layout

GEMM_ROW_TILE = 16  # every M >= 16 gave the same rows
ODD_WIDTH_ROW_TILE = 32  # one vector step of floats: an op over [M, odd width] needs M a multiple of it
MAX_PROBED_INNER = 512  # larger K took split paths at 2 threads (M up to 128 differed at K=1024)


def row_tile_for(config) -> int:
    """16, or 32 when a transcendental elementwise op runs over an odd row width: qwen2_moe's sigmoid
    shared-expert gate over [M, 1], silu over an odd expert width, rotary cos/sin over an odd head_dim/2."""
    widths = [config.head_dim // 2, config.intermediate_size, config.moe_intermediate_size or 2]
    if config.shared_expert_intermediate_size:
        widths += [1, config.shared_expert_intermediate_size]
    return ODD_WIDTH_ROW_TILE if any(width % 2 for width in widths) else GEMM_ROW_TILE


def default_row_tile(config, device: str, dtype: torch.dtype) -> int:
    """Padding is on by default where it can make logits invariant: CPU in float32."""
    return row_tile_for(config) if device.startswith("cpu") and dtype == torch.float32 else 1


def padded_rows(rows: int, row_tile: int) -> int:
    return -(-rows // row_tile) * row_tile


def apply_row_tile(model: torch.nn.Module, row_tile: int) -> None:
    """Set every MoE layer's expert row padding (from outside the model, after it is built and placed), and
    lay its CPU float32 weights out for the padded GEMMs: column-major with a tile, row-major without
    (runtime/weight_layout.py: faster at padded row counts, and bitwise the same there)."""
    for module in model.modules():
        if isinstance(module, MoE):
            module.row_tile = row_tile
    gemm_layout(model, column_major=row_tile > 1)


def gemm_inner_sizes(config) -> set[int]:
    """The K of every GEMM the model runs: hidden (qkv, router, experts' gate/up, head), attention
    output (heads x head_dim), expert, dense and shared-expert widths (down projections)."""
    sizes = {config.hidden_size, config.num_heads * config.head_dim}
    layers = range(config.num_layers)
    if any(config.layer_is_moe(i) for i in layers):
        sizes.add(config.moe_intermediate_size)
        if config.shared_expert_intermediate_size:
            sizes.add(config.shared_expert_intermediate_size)
    if not all(config.layer_is_moe(i) for i in layers):
        sizes.add(config.intermediate_size)
    return sizes


def probe_gemm_rows(inner_sizes: set[int], row_tile: int, threads: int | None, seed: int = 0) -> bool:
    """True when, for each K, every row of M-row GEMMs (M a multiple of row_tile, 1x..33x) equals the same
    row computed in a row_tile-row GEMM, at `threads` threads (None: the current count). ~50 ms."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(seed)
        for inner in sorted(inner_sizes):
            weight = torch.randn(inner, 384, generator=generator).t()  # column-major, as apply_row_tile lays them
            x = torch.randn(row_tile * 33, inner, generator=generator)
            alone = torch.cat([torch.nn.functional.linear(x[i : i + row_tile], weight) for i in range(0, x.shape[0], row_tile)])
            for tiles in (2, 3, 5, 33):
                rows = tiles * row_tile
                if not torch.equal(torch.nn.functional.linear(x[:rows], weight), alone[:rows]):
                    return False
        return True
    finally:
        torch.set_num_threads(previous)


def invariance_holds(config, device: str, dtype: torch.dtype, row_tile: int, threads: int | None) -> bool:
    """Whether this stage setup may claim bitwise batch invariance (see the module docstring)."""
    if row_tile <= 1 or not device.startswith("cpu") or dtype != torch.float32:
        return False
    inner = gemm_inner_sizes(config)
    return max(inner) <= MAX_PROBED_INNER and probe_gemm_rows(inner, row_tile, threads)
