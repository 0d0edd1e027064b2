"""A run says when the bench's own event loop stalled: `_race` records how late its poll woke, and
`client_stall` turns a long stall into a run warning naming the client, not the engine."""

from __future__ import annotations

import asyncio
import time

from strata_bench.driver import _race
from strata_bench.run_verdicts import CLIENT_STALL_S, client_stall


def test_a_loop_blocked_by_the_client_is_recorded_as_a_stall():
    async def blocks_the_loop():
        await asyncio.sleep(0.05)  # the poll is waiting now
        time.sleep(0.6)  # a synchronous call on the loop: nothing else runs meanwhile
        await asyncio.sleep(0.05)

    stall: list[float] = []
    asyncio.run(_race(blocks_the_loop(), lambda: None, 60.0, stall))
    assert stall and stall[0] >= 0.45  # the poll due 0.1 s in woke after the 0.6 s block
    assert client_stall(stall, stall[1] - 1.0)[0].startswith("client stall: the bench's event loop ran")


def test_a_short_stall_is_no_warning_and_a_long_one_says_when():
    assert client_stall([], 0.0) == []
    assert client_stall([CLIENT_STALL_S - 0.01, 5.0], 0.0) == []
    assert "+4.00 s" in client_stall([CLIENT_STALL_S, 5.0], 1.0)[0]


def test_the_report_names_a_run_whose_client_stalled(tmp_path):
    from strata_bench.report import build_report
    from strata_bench.tables import render

    from .test_report import make_dir, make_run  # the report tests' own run builders

    runs = [make_run("A", 0, 0.6), make_run("B", 0, 0.4)]
    runs[1]["warnings"] = client_stall([2.5, 11.0], 1.0)
    text = render(build_report(make_dir(tmp_path, runs, repeat=1)), "md")
    assert "- run whose timing the bench's client set in part: r00-sc-B: client stall: " in text
    assert "ran 2.50 s late from +10.00 s" in text and "r00-sc-A: client stall" not in text
