"""Servers that are not Strata, played by the synthetic server: the defects a new user met, each pinned.

A llama-cpp-python-like server (UUID request ids only, text prompts, `owned_by: me`), a server that ends
streams early, an arm whose every request fails, and one arm measuring one running server.
"""

import asyncio
import json

from strata_bench.engines.families import LLAMA_CPP, LLAMA_CPP_PYTHON, OPENAI, STRATA, VLLM, wire_request_id
from strata_bench.engines.probe import probe
from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import stream_completion

from .conftest import bench

SYN = "python -m strata_bench.synthetic --port {port} --itl-ms 5 --read-ms-per-token 0.1"
LLAMA_CPP_PYTHON_LIKE = SYN + " --owned-by me --token-ids false --uuid-request-ids true"


def test_greedy_means_neutral_penalties_in_every_family():
    for fam in (STRATA, LLAMA_CPP, LLAMA_CPP_PYTHON, VLLM, OPENAI):
        body = fam.request_body("x" if not fam.ids_in else [1, 2], 4)
        assert (
            body["temperature"] == 0 and body.get("presence_penalty", 0) == 0 and body.get("frequency_penalty", 0) == 0
        )
        assert (
            body.get("top_p", 1) == 1 and body.get("repeat_penalty", 1) == 1 and body.get("repetition_penalty", 1) == 1
        )
    # llama-cpp-python applies repeat_penalty 1.1 unless told otherwise; llama.cpp also cuts top-k and min-p
    assert LLAMA_CPP_PYTHON.request_body("x", 4)["repeat_penalty"] == 1.0
    native = LLAMA_CPP.request_body([1, 2], 4, logprobs=2, cold=True)
    assert native["top_k"] == 0 and native["min_p"] == 0 and native["n_predict"] == 4 and native["n_probs"] == 2
    assert native["return_tokens"] and native["cache_prompt"] is False


def test_request_ids_take_a_form_the_family_accepts():
    assert STRATA.headers("r00-x-a-join") == {"X-Request-Id": "r00-x-a-join"}
    uuid_id = LLAMA_CPP_PYTHON.headers("r00-x-a-join")["X-Request-Id"]
    assert uuid_id == wire_request_id("r00-x-a-join") and len(uuid_id) == 36
    assert LLAMA_CPP.headers("r00-x-a-join") == {}


def test_a_readable_id_is_what_llama_cpp_python_refuses(synthetic):
    url = synthetic("--owned-by", "me", "--token-ids", "false", "--uuid-request-ids", "true")
    info = probe(url)
    assert info.family_name == "llama-cpp-python" and info.prompt_mode == "text"
    refused = asyncio.run(
        stream_completion(
            url, info.family.request_body("hi", 3), StreamResult("r"), headers={"X-Request-Id": "r00-x-a-join"}
        )
    )
    assert refused.ended_by == "error" and "HTTP 400 from POST /v1/completions" in refused.error
    accepted = asyncio.run(
        stream_completion(
            url, info.family.request_body("hi", 3), StreamResult("r"), headers=info.family.headers("r00-x-a-join")
        )
    )
    assert accepted.error is None and accepted.finish_reason == "length"


def test_bench_against_a_llama_cpp_python_like_server_has_no_failed_requests(tmp_path, tiny_scenario):
    out = tmp_path / "lcp"
    r = bench("run", "--arm", f"lcp={LLAMA_CPP_PYTHON_LIKE}", "--scenarios", str(tiny_scenario), "--out", str(out))
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "runs" / "r00-tiny-lcp.json").read_text())
    assert run["status"] == "ok" and run["server"]["family"] == "llama-cpp-python" and run["prompt_mode"] == "text"
    assert all(q["error"] is None for q in run["requests"])


def test_a_stream_ended_early_without_finish_reason_is_an_error(synthetic, tmp_path, tiny_scenario):
    url = synthetic("--end-early-after", "3")
    r = asyncio.run(stream_completion(url, {"prompt": [1], "max_tokens": 10}, StreamResult("r", max_tokens=10)))
    assert r.ended_by == "error" and "without a finish_reason after 3 tokens of 10 asked" in r.error
    out = tmp_path / "early"
    b = bench("run", "--arm", f"early={SYN} --end-early-after 3", "--scenarios", str(tiny_scenario), "--out", str(out))
    assert b.returncode == 1 and "early FAILED" in b.stdout, b.stdout


def test_an_arm_whose_requests_all_fail_exits_1_with_no_statistics_or_wins(tmp_path, tiny_scenario):
    out = tmp_path / "broken"
    r = bench(
        "run",
        "--arm",
        f"good={SYN}",
        "--arm",
        f"bad={SYN} --fail-match tiny",
        "--scenarios",
        str(tiny_scenario),
        "--repeat",
        "2",
        "--out",
        str(out),
    )
    assert r.returncode == 1, r.stderr
    assert "**bad FAILED**" in r.stdout and "bad lower in" not in r.stdout and "bad higher in" not in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("| longest pause of a stream"))
    assert row.split("|")[3].strip() == "FAILED" and "**" not in row


def test_one_url_arm_measures_one_server(synthetic, tmp_path, tiny_scenario):
    url = synthetic("--itl-ms", "5", "--read-ms-per-token", "0.1")
    out = tmp_path / "one"
    r = bench("run", "--arm", f"solo=@{url}", "--scenarios", str(tiny_scenario), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert any(line.startswith("| longest pause of a stream") for line in r.stdout.splitlines())


def test_a_server_that_runs_streams_one_at_a_time_is_marked_serialised():
    from strata_bench.run_verdicts import serialised as _serialised

    def stream(name, times):
        return StreamResult(name, role="stream", times=list(times))

    queue = [stream("s0", [1.0, 1.1, 1.2]), stream("s1", [1.3, 1.4]), StreamResult("j", role="joiner", times=[1.25])]
    assert _serialised(queue) and _serialised(queue)[0].startswith("serialised:")
    assert _serialised([stream("s0", [1.0, 1.2, 1.4]), stream("s1", [1.1, 1.3])]) == []  # they overlap
    assert _serialised([stream("s0", [1.0, 1.1])]) == []  # one stream proves nothing
