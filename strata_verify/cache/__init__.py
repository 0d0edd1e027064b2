"""The cache check (`strata-verify cache`): `plan.py` (session sizes and prompts), `check.py` (runs the phases),
`run.py` (what was seen), `steps.py` (the verdicts), `cli.py` (the subcommand)."""
