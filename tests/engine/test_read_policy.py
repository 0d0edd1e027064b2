"""The read modes' policy, as pure functions: which read a configuration selects, the run-end estimate
behind the pause target, when an interruptible run ends, how deep it fills, and which group rides."""

from __future__ import annotations

import pytest

from strata_engine.config import SchedulerConfig
from strata_engine.scheduler.read_policy import (
    ReadKind,
    choose_rider,
    end_run,
    interruptible,
    issue_depth,
    read_budget_ms,
    read_kind,
    run_end_estimate_ms,
)

PIPED = dict(batch=4, batch_groups=2, num_stages=2)


@pytest.mark.parametrize(
    "config, kind",
    [
        (dict(batch=4), ReadKind.CHUNK),
        (dict(batch=4, pause_target_ms=500.0), ReadKind.CHUNK),  # one group: the modes do not apply
        (PIPED, ReadKind.RUN),
        (dict(PIPED, piped_read_piece=512), ReadKind.PIECE),
        (dict(PIPED, pause_target_ms=500.0), ReadKind.TARGET),  # its own kind, not a piece
        (dict(PIPED, pause_target_ms=500.0, piped_read_piece=512), ReadKind.TARGET),  # pieces only cap its runs
        (dict(PIPED, read_mix=1, pause_target_ms=500.0), ReadKind.MIX),  # mixing under a target: riders when due
    ],
)
def test_read_kind(config, kind):
    assert read_kind(SchedulerConfig(**config)) is kind


def test_only_the_pause_target_budgets_a_run_and_only_while_a_slot_decodes():
    config = SchedulerConfig(**PIPED, pause_target_ms=500.0)
    assert read_budget_ms(config, ReadKind.TARGET, decoding=True) == 500.0
    assert read_budget_ms(config, ReadKind.TARGET, decoding=False) is None
    assert read_budget_ms(config, ReadKind.PIECE, decoding=True) is None
    assert interruptible(config) and not interruptible(SchedulerConfig(**PIPED, piped_read_piece=512))


def test_run_end_estimate():
    assert run_end_estimate_ms([], 1, 0.0) is None  # nothing known yet
    assert run_end_estimate_ms([750.0], 1, 750.0, num_stages=2) == 750.0 + 2 * 375.0  # one out: at most 750 / 2 a chunk
    assert run_end_estimate_ms([750.0, 850.0], 1, 850.0) == 1050.0  # the chunk in flight, then the new one
    assert (
        run_end_estimate_ms([0.0, 10.0, 20.0, 30.0, 40.0, 100.0], 0, 100.0) == 100.0 + (100.0 - 10.0) / 4
    )  # the last 4
    assert (
        run_end_estimate_ms([], 1, 700.0, prior_interval_ms=100.0) == 900.0
    )  # before two are out: the last run's interval
    assert run_end_estimate_ms([750.0, 850.0], 1, 900.0, prior_interval_ms=5.0) == 1100.0  # this run's, from now
    with pytest.raises(ValueError, match="in_flight"):
        run_end_estimate_ms([1.0, 2.0], -1, 0.0)


def test_end_run_asks_should_stop_first_then_the_budget():
    asked = []
    assert end_run(lambda: asked.append(1) or True, None, [], 0, 0.0, None, 2) and asked == [1]
    assert not end_run(None, None, [100.0, 200.0], 1, 200.0, None, 2)  # no target: never by time
    assert not end_run(None, 400.0, [100.0, 200.0], 1, 200.0, None, 2)  # 200 + 2 x 100 = 400: fits
    assert end_run(None, 399.0, [100.0, 200.0], 1, 200.0, None, 2)
    assert not end_run(None, 1.0, [], 1, 0.0, None, 2)  # nothing measured: go on


def test_issue_depth_is_one_until_a_pause_target_has_a_measurement():
    assert issue_depth(None, None, 0, 2) == 3  # no target: the pipeline full plus one decision
    assert issue_depth(500.0, None, 0, 2) == 1  # nothing known: one chunk measures the run
    assert issue_depth(500.0, None, 1, 2) == 3
    assert issue_depth(500.0, 40.0, 0, 2) == 3  # the previous run's interval is known


def test_choose_rider_round_robin_skips_groups_not_ready_not_due_or_empty():
    rows = {0: True, 1: True, 2: False}
    pick = lambda turn, ready, since=(0.0, 0.0, 0.0), interval=None, gap=None: choose_rider(  # noqa: E731
        turn, ready, since, rows.__getitem__, interval, 2, gap
    )
    assert pick(0, [True, True, True]) == (0, 1)
    assert pick(1, [True, True, True]) == (1, 2)
    assert pick(2, [True, True, True]) == (0, 4)  # group 2 has no decoding rows left
    assert pick(0, [False, True, True]) == (1, 2)  # group 0's token is still in flight
    assert pick(0, [False, False, True]) == (None, 3)
    # Under a pause target of 100 ms with 20 ms intervals on 2 stages: due once 100 - 3 x 20 = 40 ms have passed.
    assert pick(0, [True, True, True], since=(30.0, 50.0, 0.0), interval=20.0, gap=100.0) == (1, 2)
    assert pick(0, [True, True, True], since=(30.0, 10.0, 0.0), interval=20.0, gap=100.0) == (None, 3)
    assert pick(0, [True, True, True], since=(0.0, 0.0, 0.0), interval=None, gap=100.0) == (
        0,
        1,
    )  # nothing measured: ride
