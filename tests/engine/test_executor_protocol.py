"""Both executors implement the whole `scheduler/protocol.Executor`, the prompt cache's `PrefixCopies`
included: every member it declares is there, and every method takes the parameters it declares (the
scheduler and the prompt cache read them directly, probing nothing)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Protocol

import pytest

from fakes.scheduler import TEST_PROFILE, FakeClock, RecordingExecutor
from strata_engine.executors.sim import SimExecutor
from strata_engine.executors.torch_executor import TorchExecutor
from strata_engine.scheduler.prompt_cache import NoPrefixCache, PrefixCopies
from strata_engine.scheduler.protocol import Executor


def members(protocol: type) -> dict[str, object]:
    """Name -> the declared function (None for a data attribute) of a Protocol and its protocol bases."""
    out: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        out.update({name: None for name in getattr(klass, "__annotations__", {})})
        out.update({name: f for name, f in vars(klass).items() if inspect.isfunction(f) and not name.startswith("_")})
    return out


def sim() -> SimExecutor:
    clock = FakeClock()
    return SimExecutor(TEST_PROFILE, clock=clock, sleep=clock.sleep)


EXECUTORS = {
    "sim": sim,
    "torch": lambda: TorchExecutor(SimpleNamespace(num_stages=2, batch_invariant=True), kv_bytes_per_token=8),
}


def test_the_protocol_declares_every_call_and_the_cache_members():
    declared = members(Executor)
    assert {"num_stages", "read", "decode", "mixed", "prepare_slot", "free_slot"} <= set(declared)
    assert set(members(PrefixCopies)) == {
        "supports_prefix_cache",
        "kv_bytes_per_token",
        "batch_invariant",
        "save_prefix",
        "restore_prefix",
        "drop_prefix",
        "kv_generation",
        "kv_held",
        "kv_window",
        "pin_prefix",
        "unpin_prefix",
    }
    assert set(members(PrefixCopies)) <= set(declared)


@pytest.mark.parametrize("name", EXECUTORS)
def test_each_executor_implements_the_protocol(name):
    executor = EXECUTORS[name]()
    for member, declared in members(Executor).items():
        assert hasattr(executor, member), f"{name} lacks {member}"
        if declared is not None:
            wanted = list(inspect.signature(declared).parameters)[1:]
            assert list(inspect.signature(getattr(executor, member)).parameters) == wanted, f"{name}.{member}"


def test_an_executor_without_the_cache_says_so_and_refuses_copies():
    executor = RecordingExecutor(sim())  # the scheduler tests' recorder: a test double without the cache
    assert isinstance(executor, NoPrefixCache) and not executor.supports_prefix_cache
    assert (executor.kv_generation(), executor.kv_held(0), executor.batch_invariant) == (0, (0, 0), False)
    with pytest.raises(NotImplementedError, match="no prompt cache"):
        executor.save_prefix(1, 0, 4)
