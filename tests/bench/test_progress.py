import io

from strata_bench.progress import Progress, fmt_duration


def test_lines_name_the_run_the_arm_elapsed_and_eta():
    out = io.StringIO()
    p = Progress(3, stream=out, live=False)
    p.skip("r00-x-a")
    p.begin(1, "r00-x-b", "b")
    p.end("ok", "longest_pause_s=1.2")
    p.begin(2, "r01-x-b", "b")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/3] r00-x-a: already recorded, skipped (--resume)"
    assert lines[1].startswith("[2/3] r00-x-b (arm b): starting; elapsed ")
    assert lines[2].startswith("[2/3] r00-x-b (arm b): ok in ") and "(longest_pause_s=1.2)" in lines[2]
    assert "; ETA " in lines[2] and "ETA" in lines[3]  # one run measured, one left: an estimate exists
    assert p.done == 2 and p.eta() is not None


def test_quiet_prints_nothing_and_durations_read_well():
    out = io.StringIO()
    p = Progress(1, stream=out, quiet=True)
    p.begin(0, "r", "a")
    p.end("failed")
    assert out.getvalue() == ""
    assert (fmt_duration(5), fmt_duration(65), fmt_duration(3725)) == ("5s", "1m05s", "1h02m05s")
