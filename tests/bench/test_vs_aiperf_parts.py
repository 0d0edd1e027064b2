"""benchmarks/bench_vs_aiperf.py's own parts: the local byte-level tokenizer AIPerf counts with, the skip
message without AIPerf, and the report naming the definition that differs."""

import argparse
import subprocess
import sys

import pytest

from .conftest import REPO, load_benchmark

SCRIPT = REPO / "benchmarks" / "bench_vs_aiperf.py"


def load_script():
    return load_benchmark("bench_vs_aiperf")


def test_the_local_tokenizer_is_one_token_per_byte_like_strata(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    load_script().byte_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in ("hello world", "  two  spaces\n", "héllo ✓"):
        ids = tok.encode(text).ids
        assert len(ids) == len(text.encode("utf-8")), text
        assert tok.decode(ids) == text


def run_without_aiperf(tmp_path):
    """The script with an --aiperf that does not exist and --out tmp_path/o."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--aiperf", str(tmp_path / "no-aiperf"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_aiperf_the_script_says_so_and_exits_0(tmp_path):
    r = run_without_aiperf(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "AIPerf is not installed" in r.stdout and "comparison skipped" in r.stdout
    assert not (tmp_path / "o").exists()  # nothing started, nothing written


def test_an_out_folder_that_exists_is_named_before_anything_starts(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "earlier.json").write_text("{}")
    r = run_without_aiperf(tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"--out {tmp_path / 'o'} exists" in r.stderr and "Traceback" not in r.stderr
    assert [f.name for f in (tmp_path / "o").iterdir()] == ["earlier.json"]  # another run's data untouched


def test_the_report_names_each_definition_that_differs(capsys):
    module = load_script()
    args = argparse.Namespace(concurrency=4, requests=40, input_len=256, output_len=64, rounds=2, tolerance=0.05)
    same = {"ttft_ms": 100.0, "tpot_ms": 20.0, "latency_ms": 1360.0, "output_throughput": 180.0}
    rows = {"strata-bench": [same, same], "aiperf": [dict(same, ttft_ms=140.0), dict(same, ttft_ms=140.0)]}
    module.report(rows, args)
    out = capsys.readouterr().out
    assert "| TTFT p50 (ms) | 100 | 140 | -28.6% | DIFFERS |" in out
    assert "| request latency p50 (ms) | 1360 | 1360 | +0.0% | agree |" in out
    assert out.count("DIFFERS") == 1 and "- TTFT p50 (ms): -28.6%." in out


def test_the_client_cpu_counts_a_child_process_without_psutil():
    """AIPerf may live in its own venv (`--aiperf`), so the client's CPU is read from /proc, not psutil; a child
    that burns 0.6 CPU seconds, then idles, is counted in the tree's samples."""
    burn = "import time\nwhile time.process_time() < 0.6: pass\ntime.sleep(1.2)"  # then sampled while alive
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"]
    )
    tree = load_script().TreeCPU(parent.pid)
    parent.wait(timeout=60)
    tree.done.set()
    tree.thread.join()
    assert tree.samples and tree.samples[-1][1] >= 0.6, tree.samples
