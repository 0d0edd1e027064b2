"""The console script in a subprocess: bad input, the whole pipeline on synthetic arms, resume, failing arms."""

import json
import signal
import subprocess
import time

from strata_bench.engines.launcher import free_port

from .conftest import BENCH, REPO, assert_usage_errors, bench

SYN = "python -m strata_bench.synthetic --port {port} --itl-ms 5 --read-ms-per-token 0.1"
PIECES = SYN + " --mode pieces --piece-tokens 500 --piece-decode-ms 20"


def test_bad_input_is_a_usage_error_before_anything_runs(tmp_path):
    out = tmp_path / "never"
    cases = [
        (["--arm", f"a={SYN}", "--arm", f"b={SYN}", "--scenarios", "two_joiners,nope"], "unknown scenario 'nope'"),
        (["--arm", f"a={SYN}", "--arm", "b"], "expected NAME=COMMAND"),
        (["--scenarios", "two_joiners"], "NAME=@URL"),
        (["--arm", f"a={SYN}", "--arm", f"b=@http://127.0.0.1:{free_port()}"], "does not answer"),
        (["--arm", f"b=@http://127.0.0.1:{free_port()}"], "arm 'b' (@http://127.0.0.1:"),
        (["--arm", f"a={SYN}", "--arm", f"a={SYN}"], "unique"),
        (["--preset", "nope"], "unknown preset"),
        (["--preset", "demo", "--time-scale", "5"], "real engine"),
    ]
    assert_usage_errors("run", cases, out)
    assert_usage_errors(
        "preset", [(["demo", "--arms", "release,nope"], "preset 'demo' has no arm 'nope'; its arms: ")], out
    )
    r = bench("report", str(tmp_path))
    assert r.returncode == 2 and "not a bench directory" in r.stderr


def test_run_report_plot_on_synthetic_arms(tmp_path, tiny_scenario):
    out = tmp_path / "b"
    r = bench(
        "run",
        "--arm",
        f"release={SYN}",
        "--arm",
        f"pieces={PIECES}",
        "--scenarios",
        str(tiny_scenario),
        "--repeat",
        "2",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    # progress on stderr names runs and arms; the report on stdout has the spec-like table
    assert "[1/4] r00-tiny-release (arm release)" in r.stderr and "[4/4] r01-tiny-release" in r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("|") and "release" in line)
    assert header.split("|")[2].strip() == "release" and header.split("|")[3].strip() == "pieces"
    for label in (
        "longest pause of a stream",
        "total time paused per stream",
        "tokens the streams got meanwhile",
        "the big prompt: TTFT",
        "small: TTFT",
        "stream token rate after the anchor",
        "inter-token latency p99",
    ):
        assert any(line.startswith(f"| {label}") for line in r.stdout.splitlines()), label
    assert "pieces lower in" in r.stdout and "sign test p=" in r.stdout and "bootstrap CI" in r.stdout
    # every report defines its figures, one line each; the rate says it is not throughput
    assert "Definitions:" in r.stdout and "- stream token rate after the anchor:" in r.stdout
    assert "not throughput" in r.stdout and "- inter-token latency (pooled gaps):" in r.stdout
    assert "Greedy tokens: every arm gave the same tokens" in r.stdout
    assert (out / "report.md").read_text() == r.stdout.rstrip("\n") + "\n"

    meta = json.loads((out / "meta.json").read_text())
    assert meta["plan"] == ["r00-tiny-release", "r00-tiny-pieces", "r01-tiny-pieces", "r01-tiny-release"]
    prov = meta["provenance"]
    assert prov["packages"]["httpx"] and prov["git"]["cwd"]["revision"] and prov["device"]["cpu_count"]
    assert meta["config"]["arms"][1]["command"] == PIECES
    run = json.loads((out / "runs" / "r00-tiny-pieces.json").read_text())
    assert run["status"] == "ok" and run["prompt_mode"] == "ids" and run["server"]["engine"]["mode"] == "pieces"
    assert run["command"].startswith("python -m strata_bench.synthetic --port ") and "{port}" not in run["command"]
    # one piece per 8-token stream prompt, then 2000 and 1000 tokens at 500 a piece
    assert [e["kind"] for e in run["engine_events"]].count("PIECE") == 2 + 4 + 2
    big = next(q for q in run["requests"] if q["name"] == "big")
    assert len(big["token_ids"]) == len(big["token_times"]) == 4 and big["prompt_sha256"]
    streams = [q for q in run["requests"] if q["role"] == "stream"]
    assert all(q["ended_by"] == "cancelled" for q in streams)  # closed after the tail
    assert (out / "logs" / "r00-tiny-pieces.stderr").read_text().startswith("synthetic: serving")

    js = json.loads(bench("report", str(out), "--format", "json").stdout)
    (tiny,) = js["scenarios"]
    pause = next(m for m in tiny["metrics"] if m["key"] == "longest_pause_s")
    assert pause["summary"]["release"]["n"] == 2 and pause["vs_baseline"]["pieces"]["n_pairs"] == 2
    assert js["tokens"]["equal"] is True
    csv_lines = bench("report", str(out), "--format", "csv", "--baseline", "pieces").stdout.strip().splitlines()
    assert csv_lines[0].startswith("scenario,metric,label") and len(csv_lines) == 1 + 2 * len(tiny["metrics"])
    assert bench("report", str(out), "--baseline", "nope").returncode == 2

    p = bench("plot", str(out))
    assert p.returncode == 0, p.stderr
    pngs = [line for line in p.stdout.splitlines() if line.endswith(".png")]
    assert len(pngs) == 4 + 2  # one per run, one per round with the arms stacked
    for path in pngs:
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_different_greedy_token_is_named(tmp_path, tiny_scenario):
    out = tmp_path / "d"
    r = bench(
        "run",
        "--arm",
        f"a={SYN}",
        "--arm",
        f"b={SYN} --perturb-match stream1 --perturb-from 3",
        "--scenarios",
        str(tiny_scenario),
        "--out",
        str(out),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    assert "Greedy tokens DIFFER in 1 of 4 request pairs" in r.stdout
    assert "round 0 tiny request stream1: b differs from a at token 3" in r.stdout


def test_interrupt_then_resume_loses_nothing(tmp_path, tiny_scenario):
    out, hold = tmp_path / "r", tmp_path / "hold"
    hold.touch()  # arm b's engine is not healthy while this exists: the run waits there for the signal
    args = [
        "run",
        "--arm",
        f"a={SYN}",
        "--arm",
        f"b={SYN} --hold-while {hold}",
        "--scenarios",
        str(tiny_scenario),
        "--repeat",
        "2",
        "--out",
        str(out),
        "--no-report",
        "--health-timeout",
        "120",
    ]
    # A shell's background job (`pytest ... &`) starts with SIGINT ignored, and a child inherits that: Python then
    # installs no KeyboardInterrupt handler and the signal below would be lost. The bench gets Ctrl-C's default.
    proc = subprocess.Popen(
        [BENCH, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not list((out / "runs").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    saved = {p.name: p.read_bytes() for p in (out / "runs").glob("*.json")}
    assert len(saved) == 1, sorted(saved)  # a's first run; b's was held until the signal
    hold.unlink()

    again = bench(*args)
    assert again.returncode == 2 and "already holds a bench" in again.stderr
    resumed = bench("run", "--resume", "--out", str(out), "--no-report")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("already recorded, skipped") == len(saved)
    after = {p.name: p.read_bytes() for p in (out / "runs").glob("*.json")}
    assert len(after) == 4 and all(after[name] == data for name, data in saved.items())
    other = bench(
        "run",
        "--resume",
        "--out",
        str(out),
        "--arm",
        f"a={SYN}",
        "--arm",
        f"c={SYN}",
        "--scenarios",
        str(tiny_scenario),
        "--repeat",
        "2",
    )
    assert other.returncode == 2 and "other settings" in other.stderr


def test_sigterm_stops_the_engine_it_started_and_keeps_finished_runs(tmp_path, tiny_scenario):
    """A CI runner's cancel or `kill` sends SIGTERM: the bench stops the engine it started (its own session, so
    nothing else would) and keeps what finished, as on Ctrl-C."""
    out, hold = tmp_path / "t", tmp_path / "hold-term"
    hold.touch()  # arm b's engine is up but not healthy while this exists: the bench waits on it
    proc = subprocess.Popen(
        [BENCH, "run", "--arm", f"a={SYN}", "--arm", f"b={SYN} --hold-while {hold}", "--scenarios", str(tiny_scenario)]
        + ["--out", str(out), "--no-report", "--health-timeout", "120"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def held_engines() -> list[str]:
        found = subprocess.run(["pgrep", "-f", "--", f"--hold-while {hold}"], capture_output=True, text=True)
        return found.stdout.split()

    deadline = time.monotonic() + 120
    while not (list((out / "runs").glob("*.json")) and held_engines()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held_engines(), "arm b's engine never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    left = held_engines()
    subprocess.run(["pkill", "-f", "--", f"--hold-while {hold}"])  # a failing run leaves nothing behind either
    assert left == [], "the bench ended and left arm b's engine running"
    assert proc.returncode == 130, err
    assert "--resume" in err
    assert len(list((out / "runs").glob("*.json"))) == 1  # a's run, kept


def test_failing_arms_are_recorded_and_the_others_go_on(tmp_path, tiny_scenario):
    out = tmp_path / "f"
    r = bench(
        "run",
        "--arm",
        f"good={SYN}",
        "--arm",
        "broken=sh -c 'echo boom-on-stderr >&2; exit 3'",
        "--arm",
        f"sleepy={SYN} --health-delay-s 100",
        "--arm",
        f"dying={SYN} --die-after-s 0.2",
        "--scenarios",
        str(tiny_scenario),
        "--out",
        str(out),
        "--health-timeout",
        "2",
    )
    assert r.returncode == 1, r.stderr
    assert "arm 'broken': the engine exited with status 3 before it was healthy" in r.stderr
    assert "boom-on-stderr" in r.stderr
    assert "arm 'sleepy': not healthy after 2 s" in r.stderr
    assert "arm 'dying': the engine exited with status 3 during the run" in r.stderr
    assert "dying on purpose" in r.stderr
    runs = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert {k: v["status"] for k, v in runs.items()} == {
        "r00-tiny-good": "ok",
        "r00-tiny-broken": "failed",
        "r00-tiny-sleepy": "failed",
        "r00-tiny-dying": "failed",
    }
    assert "boom-on-stderr" in runs["r00-tiny-broken"]["failure"]
    assert "| runs" in r.stdout and "1 failed" in r.stdout and "failed run: r00-tiny-broken" in r.stdout


def test_scenarios_and_presets_are_listed():
    r = bench("scenarios")
    assert r.returncode == 0 and "two_joiners:" in r.stdout and "followup:" in r.stdout
    p = bench("preset", "--list")
    assert p.returncode == 0 and "pr2050:" in p.stdout and "release, piece32k, piece16k" in p.stdout
