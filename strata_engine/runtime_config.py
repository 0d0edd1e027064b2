"""The torch runtime's knobs: threads, the compiled step and its GEMMs, the row tile, the decode threads.

`RuntimeConfig` is a frozen, validated value (no torch here); `EngineConfig.runtime_config()` resolves it from the
flags and the STRATA_* variables (knobs.py) and the torch backend is built from it (backends.build_torch, the
pipelines, the stage ranks' StageSpec). The scheduler never sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from . import knobs

GEMMS = ("aten", "template")  # the compiled step's GEMMs: MKL's through ATen, or inductor's C++ template
ROW_TILE_ENV, DECODE_ALL_THREADS_ENV, GEMMS_ENV = (
    "STRATA_ROW_TILE",
    "STRATA_DECODE_ALL_THREADS",
    "STRATA_COMPILED_GEMMS",
)
RUNTIME_KNOBS = (GEMMS_ENV, ROW_TILE_ENV, DECODE_ALL_THREADS_ENV)  # the order they are read (and raise) in


def _whole(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@dataclass(frozen=True)
class RuntimeConfig:
    threads: int | None = None  # torch intra-op threads per stage (--threads); None = the backend's default
    compile: bool = False  # decode-only micro-batches through the compiled step (--compile, runtime/compiled_step.py)
    gemms: str = "aten"  # the compiled step's GEMMs (STRATA_COMPILED_GEMMS): aten or template
    # Measuring knobs: each turns a default off to measure what it buys (docs/BATCHING.md)
    row_tile: int | None = None  # STRATA_ROW_TILE: pad every GEMM's rows to it; None = the probed tile
    decode_all_threads: bool = False  # STRATA_DECODE_ALL_THREADS: thread stages decode at their full thread count

    def __post_init__(self) -> None:
        if self.threads is not None and not _whole(self.threads, 1):
            raise ValueError(f"threads (--threads) must be a whole number >= 1 or None, got {self.threads!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile (--compile) must be True or False, got {self.compile!r}")
        if self.gemms not in GEMMS:
            raise ValueError(f"gemms ({GEMMS_ENV}) must be one of {', '.join(GEMMS)}, got {self.gemms!r}")
        if self.row_tile is not None and not _whole(self.row_tile, 1):
            raise ValueError(
                f"row_tile ({ROW_TILE_ENV}) must be a whole number >= 1 (1 = padding off) or None, "
                f"got {self.row_tile!r}"
            )
        if not isinstance(self.decode_all_threads, bool):
            raise ValueError(
                f"decode_all_threads ({DECODE_ALL_THREADS_ENV}) must be True or False, got {self.decode_all_threads!r}"
            )

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        threads: int | None = None,
        compile: bool = False,
        layout: str = "plain",
    ) -> RuntimeConfig:
        """The STRATA_* variables in `env` (None = the process environment) over the layout's defaults (fastest:
        the template GEMMs; else aten); unset or empty keeps the default, a bad value raises naming the variable."""
        return cls.from_knobs(knobs.read_set(RUNTIME_KNOBS, env), threads=threads, compile=compile, layout=layout)

    @classmethod
    def from_knobs(
        cls, found: Mapping[str, Any], *, threads: int | None = None, compile: bool = False, layout: str = "plain"
    ) -> RuntimeConfig:
        """`from_env` over knobs already read (knobs.read_set): an absent one keeps the default."""
        return cls(
            threads=threads,
            compile=compile,
            gemms=found.get(GEMMS_ENV, "template" if layout == "fastest" else "aten"),
            row_tile=found.get(ROW_TILE_ENV, knobs.KNOBS[ROW_TILE_ENV].default),
            decode_all_threads=found.get(DECODE_ALL_THREADS_ENV, knobs.KNOBS[DECODE_ALL_THREADS_ENV].default),
        )
