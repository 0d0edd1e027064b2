"""Against a real server this project did not write: llama.cpp's `llama-server` serving our model as GGUF.

Skipped, with the command that installs it, where `scripts/install_llama_cpp.sh` has not built the
binary or the `gguf` package is missing. The exporter must give Strata's greedy tokens (the committed
golden answers), the probe must find the family and its per-slot context, and a bench with a Strata arm
and a llama.cpp arm on two_joiners must finish with no failed request.
"""

from __future__ import annotations

import json

import pytest

from strata_bench.engines.families import LLAMA_CPP
from strata_bench.engines.launcher import EngineProcess
from strata_bench.engines.llama_cpp import server_command
from strata_bench.engines.probe import count_tokens, probe
from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import StreamTask

from .conftest import REPO, bench

pytestmark = pytest.mark.slow
GOLDEN = REPO / "strata_verify" / "golden" / "reference-cpu.json"


def test_llama_cpp_gives_strata_greedy_tokens_and_is_probed_as_llama_cpp(llama_gguf):
    binary, gguf = llama_gguf
    with EngineProcess(
        server_command(binary, gguf, slots=2, ctx_per_slot=1024), name="llama-server", start_timeout=120
    ) as server:
        info = probe(server.url)
        assert (info.family_name, info.slots, info.ctx, info.vocab_size, info.eos_token_id) == (
            "llama.cpp",
            2,
            1024,
            258,
            257,
        )
        assert info.prompt_mode == "ids"
        assert count_tokens(server.url, info, "def f(x):") == len(b"def f(x):")  # byte-level, as ours
        golden = json.loads(GOLDEN.read_text())
        for answer in golden["answers"]:
            body = LLAMA_CPP.request_body(answer["prompt"], golden["max_tokens"], logprobs=2, cold=True)
            got = StreamTask(
                server.url,
                body,
                StreamResult(answer["name"], max_tokens=golden["max_tokens"]),
                path=LLAMA_CPP.endpoint,
                wire=LLAMA_CPP.wire,
            ).run()
            assert got.error is None and got.finish_reason == "length", got.error
            assert got.token_ids == answer["token_ids"], answer["name"]
            assert len(got.logprobs) == len(got.token_ids) and got.usage["prompt_tokens"] == len(
                answer["prompt"].encode()
            )


def test_bench_strata_and_llama_cpp_on_two_joiners_with_no_failed_request(llama_gguf, tmp_path):
    binary, gguf = llama_gguf
    out = tmp_path / "vs"
    llama_arm = server_command(binary, gguf, slots=6, ctx_per_slot=8192)
    r = bench(
        "run",
        "--arm",
        "strata=strata-engine serve --batch 6 --ctx 8192",
        "--arm",
        f"llamacpp={llama_arm}",
        "--scenarios",
        "two_joiners",
        "--scale",
        "0.0625",
        "--out",
        str(out),
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert {k: v["status"] for k, v in runs.items()} == {
        "r00-two_joiners-strata": "ok",
        "r00-two_joiners-llamacpp": "ok",
    }
    theirs = runs["r00-two_joiners-llamacpp"]
    assert theirs["server"]["family"] == "llama.cpp" and theirs["prompt_mode"] == "ids"
    assert all(q["error"] is None for run in runs.values() for q in run["requests"])
    joiner = next(q for q in theirs["requests"] if q["name"] == "join64k")
    assert joiner["measured_prompt_tokens"] == joiner["prompt_tokens"] == 4096
    header = next(line for line in r.stdout.splitlines() if line.startswith("|") and "llamacpp" in line)
    assert [c.strip() for c in header.split("|")[2:4]] == ["strata", "llamacpp"] and "FAILED" not in r.stdout
