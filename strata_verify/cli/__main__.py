"""`python -m strata_verify.cli`: the same group as the `strata-verify` console script."""

from strata_verify.cli import main

if __name__ == "__main__":
    main()
