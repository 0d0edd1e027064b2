"""The gate against a running llama.cpp `llama-server` (an engine we did not write), with `--url`.

Skipped, with the command that installs it, where the binary or the `gguf` package is missing. With
parallel slots the gate must reach a verdict with a reason for every step, judged on the client's clock
(llama-server has no event feed); with one slot every interleaving step is "not exercised", saying why;
determinism on it must equal Strata's committed golden answers (greedy with neutral penalties).
"""

from __future__ import annotations

import json

import pytest

from strata_bench.engines.launcher import EngineProcess
from strata_bench.engines.llama_cpp import server_command

from .support import REPO, SCALE, verify

pytestmark = pytest.mark.slow


def test_interleave_and_determinism_on_llama_cpp_give_verdicts_with_reasons(llama_gguf, tmp_path):
    binary, path = llama_gguf
    with EngineProcess(
        server_command(binary, path, slots=4, ctx_per_slot=4096), name="llama-server", start_timeout=120
    ) as server:
        inter = verify("interleave", "--url", server.url, "--scale", SCALE, "--json", str(tmp_path / "i.json"))
        det = verify(
            "determinism",
            "--url",
            server.url,
            "--against",
            str(REPO / "strata_verify" / "golden" / "reference-cpu.json"),
        )
    assert inter.returncode in (0, 1) and "COULD NOT RUN" not in inter.stdout, inter.stdout + inter.stderr
    steps = json.loads((tmp_path / "i.json").read_text())["report"]["steps"]
    by_name = {s["name"]: s for s in steps}
    expected = {"A and B decode", "resume offsets", *(f"{name} interleaved == solo" for name in "ABCDE")}
    assert expected <= set(by_name) and all(s["reason"] for s in steps), sorted(by_name)
    assert by_name["A and B decode"]["status"] == "pass"
    assert any("client's clock" in line or "token arrival" in line for s in steps for line in s["evidence"])
    for name in "ABCDE":  # the same greedy tokens solo and interleaved, or the index where they part
        assert by_name[f"{name} interleaved == solo"]["status"] in ("pass", "fail")
    assert "cache_prompt" in inter.stdout  # the solo runs asked to skip the prompt cache
    assert det.returncode == 0, det.stdout + det.stderr  # llama.cpp's answers equal Strata's golden ones


def test_a_one_slot_llama_cpp_is_not_exercised_with_that_reason(llama_gguf):
    binary, path = llama_gguf
    with EngineProcess(
        server_command(binary, path, slots=1, ctx_per_slot=4096), name="llama-server", start_timeout=120
    ) as server:
        out = verify("interleave", "--url", server.url, "--scale", SCALE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "NOT EXERCISED" in out.stdout and "one slot" in out.stdout and "(0 passed," in out.stdout
