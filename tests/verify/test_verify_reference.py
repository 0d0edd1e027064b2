"""The gate on the real `strata-engine serve`: it passes where it must and catches the release's step 4.

The sim executor runs the real server and scheduler with a cost model instead of weights; the
reference-engine tests run the bundled tiny model on CPU and compare with the committed golden manifest.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from strata_verify import manifest
from strata_verify.requests import default_engine_command

from .support import HERE, PY, REPO, verify

ENGINE = shlex.quote(str(Path(sys.executable).parent / "strata-engine"))
SIM = f"{ENGINE} serve --executor sim --time-scale 10 --split 2 --batch 4 --batch-groups 2 --ctx 16384"
GOLDEN = REPO / "strata_verify" / "golden" / "reference-cpu.json"
CI_SCALE = "0.05"

pytestmark = pytest.mark.slow


def test_interleave_passes_on_the_sim_engine_with_pieces():
    out = verify("interleave", "--engine", f"env STRATA_PIPED_READ_PIECE=4096 {SIM}", "--scale", "0.25")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "C read in 3 pieces" in out.stdout and "D gave way at 4096 tokens" in out.stdout


def test_the_release_fails_step_4_on_the_sim_engine():
    """The spec: 'The release fails step 4 (D never gives way).'"""
    out = verify("interleave", "--engine", SIM, "--scale", "0.25")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[NOT EXERCISED] interleave: D gives way to E" in out.stdout
    assert out.stdout.count("[NOT EXERCISED]") == 1 and "[    FAIL     ]" not in out.stdout


def test_release_and_pieces_give_the_same_six_hashes_on_the_sim_engine():
    """The spec: 'With the variables unset, both builds gave the same SHA-256 for six greedy answers, twice each.'"""
    out = verify(
        "builds",
        "--only",
        "determinism",
        "--tokens",
        "16",
        "--engine",
        f"release={SIM}",
        "--engine",
        f"piece={SIM.replace(ENGINE, 'env STRATA_PIPED_READ_PIECE=4096 ' + ENGINE, 1)}",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("same answer (release vs piece)") == 6


def test_fault_proxy_in_front_of_the_real_server_is_caught():
    proxy = f"{PY} {shlex.quote(str(HERE / 'fault_proxy.py'))} --mode perturb --request C --index 3 --"
    out = verify("interleave", "--engine", f"{proxy} env STRATA_PIPED_READ_PIECE=4096 {SIM}", "--scale", "0.25")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "C interleaved == solo: differs at token 3" in out.stdout
    assert out.stdout.count("[    FAIL     ]") == 1 and "[NOT EXERCISED]" not in out.stdout


def test_interleave_passes_on_the_reference_engine_at_ci_scale(tmp_path):
    out = verify("interleave", "--scale", CI_SCALE, "--junit", str(tmp_path / "junit.xml"), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert default_engine_command(float(CI_SCALE)) in out.stdout


def test_determinism_matches_the_golden_manifest():
    manifest.load(GOLDEN)  # committed, non-empty, with answers
    out = verify("determinism", "--engine", "strata-engine serve", "--against", str(GOLDEN), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("matches reference-cpu.json: sha256") == 6
