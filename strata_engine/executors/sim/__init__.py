"""The simulated executor: the scheduler's executor protocol over a calibrated cost model, no torch.

`executor.py` (SimExecutor), `profile.py` (cost profiles; shipped ones in `profiles/`), `clock.py` (a
virtual clock for runs faster than real time), `calibrate.py` (the model against the spec's figures:
`python -m strata_engine.executors.sim.calibrate pr2050-2x5090`).
"""

from .executor import SimExecutor
from .profile import CostProfile, load_profile

__all__ = ["CostProfile", "SimExecutor", "load_profile"]
