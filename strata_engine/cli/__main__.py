"""`python -m strata_engine.cli`: the same group as the `strata-engine` console script (a head starts its stage
ranks this way, runtime/stage_ranks/ranks.py, and torchrun runs them so, docs/DISTRIBUTED.md)."""

from strata_engine.cli import main

if __name__ == "__main__":
    main()
