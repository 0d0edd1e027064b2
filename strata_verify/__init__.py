"""strata_verify."""
