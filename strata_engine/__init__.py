"""strata_engine."""
