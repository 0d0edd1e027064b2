"""The engines tests stand up in place of the real one: one home, imported as `fakes` by every test directory
(pyproject.toml's `pythonpath = ["tests"]`), a noun per module.

  engine.py, byte_model.py  the in-process fake: `Engine`'s Python API over a byte model, under the real
                            HTTP server (tests/engine's server tests)
  http_engine.py            the HTTP fake: a whole server process on docs/API.md with the faults the gate
                            must catch (tests/verify); parts in answers.py, http_state.py,
                            http_completions.py, http_flags.py
  broken_engine.py          the real strata-engine with one planted bug (tests/verify's slow gate tests)
  scheduler.py              the scheduler's doubles: a virtual clock, a recording executor, a harness

strata_bench.synthetic is not here: it is the bench's own product (`python -m strata_bench.synthetic`,
docs/BENCH.md, an arm in a user's run, benchmarks/bench_client_overhead.py), so it ships in the wheel.
"""
