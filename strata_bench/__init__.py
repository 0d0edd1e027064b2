"""strata_bench."""
