"""The check of each command first shown in a page of docs/measurements/, by its normalised text
(doc_commands.py). Most reproduce a measurement that takes minutes and are skipped, naming what checks the
same code small; the rest run at a small size. Commands of one file run in order in one scratch directory, so
a `report` finds what the `run` before it wrote. The entries live in one module per group of pages, grouped
by page within it; CHECKS merges them, and a command may be in one of them only."""

from __future__ import annotations

from collections import Counter

from engine_measurement_checks import ENGINE_CHECKS
from gate_measurement_checks import GATE_CHECKS
from kernel_measurement_checks import KERNEL_CHECKS
from kv_measurement_checks import KV_CHECKS
from step_measurement_checks import STEP_CHECKS

_TABLES = (KERNEL_CHECKS, STEP_CHECKS, ENGINE_CHECKS, KV_CHECKS, GATE_CHECKS)
_TWICE = sorted(key for key, n in Counter(key for table in _TABLES for key in table).items() if n > 1)
assert not _TWICE, f"commands checked in two *_measurement_checks.py modules: {_TWICE}"
CHECKS: dict[str, object] = {key: check for table in _TABLES for key, check in table.items()}
