"""Every bug the broken engine patches in names a function that exists: a function that moved fails here,
in the fast tests, instead of in the slow gate tests that start the broken engine."""

from __future__ import annotations

import pytest
from fakes.broken_engine import TARGETS, _resolve


@pytest.mark.parametrize("bug", sorted(TARGETS))
def test_the_patched_function_exists(bug):
    owner, name, original = _resolve(TARGETS[bug])
    assert callable(original) and getattr(owner, name) is original


def test_a_missing_function_names_the_table():
    with pytest.raises(ImportError, match="update TARGETS"):
        _resolve(("strata_engine.scheduler.nowhere.Gone.place",))
