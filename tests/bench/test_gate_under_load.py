"""benchmarks/gate_under_load.py's summary: a verdict flip is a verdict that differs between runs, a step
status that moved while every verdict was PASS is not one, and the exit status follows the verdicts."""

import json
import subprocess
import sys

from .conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "gate_under_load.py"


def load_script():
    return load_benchmark("gate_under_load")


def step(name, status, reason="", evidence=()):
    return {"check": "interleave", "name": name, "status": status, "reason": reason, "evidence": list(evidence)}


def run(number, condition, verdict, *steps, seconds=8.0, load=0.5):
    report = {"verdict": verdict, "steps": list(steps), "seconds": seconds}
    return {"run": number, "condition": condition, "started": "", "load": load, "report": report}


PASSING = [step("A decodes", "pass"), step("D gives way to E", "not applicable")]


def record(*targets):
    return {
        "check": "interleave",
        "extra": [],
        "command": "",
        "runs_per_condition": 2,
        "hogs": 2,
        "cpu": "a CPU",
        "started": "then",
        "ended": "later",
        "targets": [{"name": name, "what": "@http://x", "runs": runs} for name, runs in targets],
    }


def test_a_step_that_moved_under_every_pass_is_no_flip_and_exits_0():
    gate = load_script()
    runs = [
        run(1, "quiet", "PASS", *PASSING),
        run(1, "loaded", "PASS", *PASSING),
        run(2, "quiet", "PASS", step("A decodes", "pass"), step("D gives way to E", "pass")),
        run(2, "loaded", "PASS", *PASSING),
    ]
    summary = gate.summarize("vllm", runs)
    assert not summary["flipped"] and not summary["failed_every_run"]
    assert [r["run"] for r in summary["moved"]] == [2] and summary["failing"] == []
    text, code = gate.render(record(("vllm", runs)))
    assert code == 0
    assert "vllm: 4 runs (quiet: 2 PASS; loaded: 2 PASS); no verdict flip; 1 run(s) with a step status" in text
    assert "| vllm | 2 | quiet | 0.50 | PASS | 8 s | interleave: D gives way to E: pass |" in text
    assert "flipped: YES" not in text and "no verdict flipped" in text


def test_one_failing_run_is_a_flip_named_with_its_step_and_request():
    gate = load_script()
    bad = step("S seeded: interleaved == solo", "not exercised", "S decoded alone", ["request S: 32 tokens"])
    runs = [
        run(1, "quiet", "PASS", *PASSING),
        run(1, "loaded", "FAIL", step("A decodes", "pass"), bad),
    ]
    text, code = gate.render(record(("llama", runs)))
    assert code == 1
    assert "**verdict flipped**: 1 of 2 run(s) not PASS" in text
    assert (
        "llama run 1 (loaded) FAIL: interleave: S seeded: interleaved == solo: not exercised: S decoded alone" in text
    )
    assert "request S: 32 tokens" in text
    assert "verdict flipped on llama" in text


def test_the_same_failure_every_run_is_no_flip_but_exits_1():
    gate = load_script()
    runs = [run(1, c, "FAIL", step("A decodes", "fail", "wrong token")) for c in ("quiet", "loaded")]
    summary = gate.summarize("x", runs)
    assert not summary["flipped"] and summary["failed_every_run"]
    line, code = gate.verdict_line([summary, gate.summarize("y", [run(1, "quiet", "PASS", *PASSING)])])
    assert code == 1 and "no run passed on x" in line and "flipped" not in line


def test_render_reads_a_kept_file_and_exits_as_its_verdicts(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(record(("strata", [run(1, "quiet", "PASS", *PASSING)]))))
    done = subprocess.run([sys.executable, str(SCRIPT), "--render", str(kept)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| strata | 1 | quiet | 0.50 | PASS | 8 s |  |" in done.stdout


def test_needle_is_a_check_it_runs():
    assert "needle" in load_script().CHECKS


def test_summary_gives_a_row_per_target_and_condition_with_the_median_wall(tmp_path):
    gate = load_script()
    runs = [run(1, "quiet", "PASS", *PASSING, seconds=s) for s in (5.0, 9.0, 7.0)]
    runs.append(run(1, "loaded", "PASS", *PASSING, seconds=12.0))
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(record(("vllm", runs))))
    text, code = gate.markdown(["--summary", str(kept)])
    assert code == 0
    assert "| then | `interleave` | vllm | `@http://x` | quiet | 3 | 3 PASS | 7 s (5-9 s) |" in text
    assert "| then | `interleave` | vllm | `@http://x` | loaded | 1 | 1 PASS | 12 s (12-12 s) |" in text
    assert gate.engine_text("/home/me/bin/llama-server -m x.gguf") == "llama-server -m x.gguf"


def test_without_target_it_runs_the_check_as_ci_does_with_no_engine_and_kv_quality_is_one(tmp_path, monkeypatch):
    gate = load_script()
    assert "kv-quality" in gate.CHECKS
    fake = tmp_path / "strata-verify"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n"
        "out = args[args.index('--json') + 1]\n"
        "json.dump({'report': {'verdict': 'PASS', 'steps': [], 'meta': {'argv': args}}}, open(out, 'w'))\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(gate, "VERIFY", str(fake))
    argv = gate.run_check("kv-quality", "", ["--kv-dtype", "q8"])["meta"]["argv"]
    assert argv[0] == "kv-quality" and "--engine" not in argv and "--url" not in argv
    assert argv[-2:] == ["--kv-dtype", "q8"]
    assert gate.run_check("answers", "strata-engine serve", [])["meta"]["argv"][1:3] == [
        "--engine",
        "strata-engine serve",
    ]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "kv-quality", "--target", "x=y"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "takes no --target" in done.stderr


def test_summary_names_the_default_engine_from_the_report_or_in_process():
    gate = load_script()
    ran = run(1, "quiet", "PASS", *PASSING)
    ran["report"]["meta"] = {"engine": "env X=1 strata-engine serve --ctx 3072"}
    kept = record(("strata", [ran]))
    kept["targets"][0]["what"] = ""
    assert "| `env X=1 strata-engine serve --ctx 3072` (the check's default) |" in gate.overview([kept])
    del ran["report"]["meta"]
    assert "| in process (the check takes no engine) |" in gate.overview([kept])
