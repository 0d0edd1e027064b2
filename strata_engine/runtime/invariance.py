"""Batch invariance: the row padding that makes a row's logits independent of the rows beside it.

Contract: with `row_tile` > 1 every GEMM of a stage runs on a row count rounded up to a multiple of
`row_tile` (the stage pads the call's flat tokens, `apply_row_tile` pads each MoE expert's rows), and
`invariance_holds` says whether that makes logits bitwise batch invariant on this machine: CPU, float32,
and a start-up probe of the model's own GEMM shapes at the stage's thread count passes.

Which tile: the smallest of 4, 8 and 16 rows that a start-up probe of the model's own GEMM shapes
passes on this machine, at the stage's thread counts (`default_row_tile`). Measured with torch 2.13 + MKL
2024.2 on AVX-512 (AMD EPYC; see docs/measurements/batch-invariance.md): under MKL's conditional numerical reproducibility
(`MKL_CBWR=AUTO,STRICT`, which `mkl_mode.py` pins) a linear layer's output row is bitwise the same for every
row count M >= 4 and any position of the row, at 1 and 2 threads, for inner sizes K <= 512 (M = 1..3 take
small-matrix paths that round differently); without it MKL's default paths needed M >= 16. A tile of 4
instead of 16 is 10-30% of a decode step at batch 1-6 (fewer padding rows in every GEMM and expert).
Per-row reductions (RMSNorm, softmax) give equal rows for any M, but elementwise transcendental ops
(sigmoid, silu, exp, cos) run 32 floats per vector step and the tail through a scalar path that rounds
differently: qwen2_moe's shared-expert gate sigmoid over [M, 1] moved with M = 16 against 32. So a tile
must also make M x width a whole number of vector steps for every such op's row width: a model with an
odd width needs 32. CUDA GEMMs pick split-K and tile shapes by problem size, so no padding makes them
invariant there; that needs fixed-tile kernels (see docs/measurements/batch-invariance.md).
"""

from __future__ import annotations

import torch

from ..model.transformer import MoE
from .weight_layout import gemm_layout

GEMM_ROW_TILES = (4, 8, 16)  # tried smallest first; 16 held under MKL's default paths, 4 under MKL_CBWR
VECTOR_FLOATS = 32  # one vector step of an elementwise op: M x width must be a multiple of it
ODD_WIDTH_ROW_TILE = 32  # an op over [M, odd width] needs M a multiple of a whole vector step
MAX_PROBED_INNER = 512  # larger K took split paths at 2 threads (M up to 128 differed at K=1024)


def _elementwise_widths(config) -> list[int]:
    """Row widths of the transcendental elementwise ops: rotary cos/sin over head_dim/2, silu over the expert
    and dense widths, qwen2_moe's sigmoid shared-expert gate over [M, 1] and its expert's silu."""
    widths = [config.head_dim // 2, config.intermediate_size, config.moe_intermediate_size or 2]
    if config.shared_expert_intermediate_size:
        widths += [1, config.shared_expert_intermediate_size]
    return widths


def tile_candidates(config) -> list[int]:
    """The tiles the elementwise ops allow, smallest first: (4, 8, 16) where every width is even enough,
    else (32,)."""
    widths = _elementwise_widths(config)
    fits = [tile for tile in GEMM_ROW_TILES if all(tile * width % VECTOR_FLOATS == 0 for width in widths)]
    return fits or [ODD_WIDTH_ROW_TILE]


def row_tile_for(config) -> int:
    """The largest candidate tile: what holds without MKL_CBWR (16, or 32 for an odd width). The engine's own
    choice is `default_row_tile`, probed; this is the tile a caller uses to compare against it."""
    return tile_candidates(config)[-1]


def default_row_tile(config, device: str, dtype: torch.dtype, threads: int | None = None) -> int:
    """Padding is on by default where it can make logits invariant: CPU in float32, with the smallest
    candidate tile whose GEMM rows the probe finds independent of the row count at 1 thread and at
    `threads` (the decode and the prompt thread counts of a stage); the largest candidate when none passes
    (`invariance_holds` then says so). 1 elsewhere."""
    if not device.startswith("cpu") or dtype != torch.float32:
        return 1
    candidates, inner = tile_candidates(config), gemm_inner_sizes(config)
    if max(inner) > MAX_PROBED_INNER:
        return candidates[-1]
    counts = sorted({1, threads or torch.get_num_threads()})
    for tile in candidates:
        if all(probe_gemm_rows(inner, tile, count) for count in counts):
            return tile
    return candidates[-1]


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
            alone = torch.cat(
                [torch.nn.functional.linear(x[i : i + row_tile], weight) for i in range(0, x.shape[0], row_tile)]
            )
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
