"""The interleave check (`strata-verify interleave`): `check.py` runs the spec's steps on one engine, `run.py`
holds what a run saw (options, completions, evidence), `steps.py` judges each step from it."""
