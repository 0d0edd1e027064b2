"""The cache check (`strata-verify cache`; its command line is cli/cache.py): `plan.py` (session sizes and
prompts), `check.py` (runs the phases), `run.py` (what was seen), `steps.py` (the verdicts)."""
