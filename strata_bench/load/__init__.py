"""Steady load (`strata-bench load`): closed loops at a concurrency and open loops at a seeded rate against a
fresh engine per run, measured with the field's metrics (TTFT, TPOT, ITL, goodput as AIPerf and vLLM define
them). `loops.py` (the loops), `workload.py` (request shapes), `client.py` (keep-alive adapter to the shared
client), `runner.py` (ABBA runs, raw JSON), `field_metrics.py`, `report.py`, `plot.py`, `cli.py`.
"""

from .loops import LoadShape, arrival_offsets, run_load

__all__ = ["LoadShape", "arrival_offsets", "run_load"]
