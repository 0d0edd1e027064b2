"""Shape check of the shipped `pr2050-2x5090` profile: the scheduler over the simulated executor, at
the spec's full sizes (64K / 32K / 45K prompts, four streams), on a virtual clock. Model time, so it is
deterministic; tolerances are loose because this checks the shape of the spec's tables, not timing."""

from __future__ import annotations

import pytest

from strata_engine.executors.sim.calibrate import K, SPEC_FIGURES, followup, main, read_alone, two_joiners
from strata_engine.executors.sim.profile import load_profile

PROFILE = load_profile("pr2050-2x5090")
ARMS = (0, 32 * K, 16 * K)


@pytest.fixture(scope="module")
def joiners():
    return [two_joiners(PROFILE, piece) for piece in ARMS]


def test_longest_pause_release_12s_32k_pieces_4s_16k_pieces_2_6s(joiners):
    pauses = [m["longest pause of a stream (s)"] for m in joiners]
    assert 11.0 <= pauses[0] <= 13.5
    assert 3.6 <= pauses[1] <= 5.0
    assert 2.2 <= pauses[2] <= 3.1


def test_pieces_trade_ttft_and_total_pause_for_short_pauses(joiners):
    def row(name):
        return [m[name] for m in joiners]

    paused = row("total time paused per stream (s)")
    assert paused[0] < paused[1] < paused[2]  # "the total time paused stays about the same" (it grows a little)
    assert paused[2] < 1.5 * paused[0]
    meanwhile = row("tokens the streams got meanwhile")
    assert meanwhile[0] < meanwhile[1] < meanwhile[2]
    for name in ("64K prompt's TTFT (s)", "32K prompt's TTFT (s)"):
        ttft = row(name)
        assert ttft[0] < ttft[1] < ttft[2], name


def test_followup_question_and_read_alone():
    question = [followup(PROFILE, piece)["one-line question sent 1 s in: its TTFT (s)"] for piece in ARMS]
    assert question[0] > question[1] > question[2]
    alone = [read_alone(PROFILE, piece)["the same prompt read alone (s)"] for piece in ARMS]
    for model, measured in zip(alone, SPEC_FIGURES["read_alone"]["the same prompt read alone (s)"]):
        assert model == pytest.approx(measured, rel=0.1)


def test_calibrate_command_prints_the_table(capsys):
    assert main(["pr2050-2x5090"]) == 0
    out = capsys.readouterr().out
    assert "| two_joiners | longest pause of a stream (s) |" in out and "/ 12.2" in out
    assert main(["no-such-profile"]) == 2
