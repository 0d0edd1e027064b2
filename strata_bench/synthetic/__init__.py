"""The synthetic OpenAI-compatible server the bench tests against: the server with known timing and faults
(`server.py`, run as `python -m strata_bench.synthetic`), the prefix cache it and the test fakes share
(`cache.py`), and its launcher on a free port (`launcher.py`).
"""
