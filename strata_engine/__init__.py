"""strata_engine: a reference MoE inference engine with slots, chunked reads, a layer split,
pipelined batch groups and the piecewise read of PR 2050.

    from strata_engine import Engine, SamplingParams
    with Engine.from_pretrained("strata-tiny-moe", batch=4) as engine:
        print(engine.generate(["def add(a, b):"], SamplingParams(max_tokens=16))[0].text)
"""

from .config import EngineConfig, SchedulerConfig
from .errors import RequestError
from .params import SamplingParams

__all__ = ["Engine", "EngineConfig", "SchedulerConfig", "SamplingParams", "RequestError"]


def __getattr__(name: str):
    # Engine pulls in torch; keep `import strata_engine` light for the bench and verify.
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(name)
