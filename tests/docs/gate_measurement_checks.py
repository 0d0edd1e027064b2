"""The check of each command first shown in the gate's measurement pages of docs/measurements/ (cache-gate.md,
gate-other-engines.md, gate-under-load.md), by its normalised text (doc_commands.py), grouped by page; merged
into measurement_checks.CHECKS, whose docstring says how they are run."""

from __future__ import annotations

from doc_checks import LLAMA_SERVER, MINUTES, VLLM_CACHE, VLLM_SERVER, Run, Skip

GATE_CHECKS: dict[str, object] = {
    # docs/measurements/cache-gate.md
    'strata-verify cache --scale 0.5 --lacks events,give-way --start-timeout 600 --engine "env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details"': Skip(
        VLLM_CACHE
    ),
    # docs/measurements/gate-other-engines.md
    "VLLM_CPU_KVCACHE_SPACE=2 ~/.cache/strata/vllm-0.32.0/venv/bin/vllm serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --port 8091 &": Skip(
        VLLM_SERVER
    ),
    ".venv/bin/strata-verify interleave --url http://127.0.0.1:8091 --scale 0.05": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server (exit 1, naming give-way)"
    ),
    # docs/measurements/gate-under-load.md
    # the kept series (--out benchmarks/results/gate-load-*.json, rendered into the page)
    **{
        f".venv/bin/python benchmarks/gate_under_load.py --check {check} --runs {runs} --target strata='strata-engine serve --layout fastest' --out benchmarks/results/gate-load-{check}-fastest{n}.json": Skip(
            MINUTES + " (the interleave run below checks the script; tests/bench/test_gate_under_load.py its summary)"
        )
        for check, runs, n in (("needle", 10, ""), ("answers", 5, ""), ("answers", 5, "-2"))
    },
    ".venv/bin/python benchmarks/gate_under_load.py --check determinism --runs 3 --target strata='strata-engine serve' --out benchmarks/results/gate-load-determinism-default.json -- --against strata_verify/golden/reference-cpu.json": Skip(
        MINUTES + " (the interleave run below checks the script; the slow suite runs determinism)"
    ),
    # CI's remaining gate commands on the engines CI gives them (no --target: the check's own default)
    ".venv/bin/python benchmarks/gate_under_load.py --check cache --runs 10 --target strata='strata-engine serve' --out benchmarks/results/gate-load-cache-default.json": Skip(
        MINUTES + " (the interleave run below checks the script; tests/verify/test_verify_cache.py the check)"
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check determinism --runs 10 --target strata='strata-engine serve' --out benchmarks/results/gate-load-determinism-default-10.json -- --against strata_verify/golden/reference-cpu.json": Skip(
        MINUTES + " (the interleave run below checks the script; the slow suite runs determinism)"
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check answers --runs 10 --out benchmarks/results/gate-load-answers-default.json": Skip(
        MINUTES + " (the kv-quality run below checks the script without --target; the slow suite runs answers)"
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --out benchmarks/results/gate-load-interleave-default.json -- --scale 0.05": Run(
        ((r"--runs 10", "--runs 1 --hogs 0"), (r"--out \S+", "--out gate-under-load-smoke.json"))
    ),
    # one quiet run and one "loaded" with no hog, in process, kept in the scratch directory (not in benchmarks/)
    ".venv/bin/python benchmarks/gate_under_load.py --check kv-quality --runs 10 --out benchmarks/results/gate-load-kv-quality-q8.json -- --kv-dtype q8": Run(
        ((r"--runs 10", "--runs 1 --hogs 0"), (r"--out benchmarks/results/", "--out "))
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check kv-quality --runs 10 --out benchmarks/results/gate-load-kv-quality-k8v4.json -- --kv-dtype k8v4": Skip(
        "the q8 command above run again with the other format CI checks; " + MINUTES
    ),
    '.venv/bin/python benchmarks/gate_under_load.py --check determinism --runs 10 --target llama-server="$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 4 --threads 1 -c 16384 --no-kv-unified --no-webui --no-warmup --override-kv qwen3moe.context_length=int:4096" --out benchmarks/results/gate-load-determinism-llama-server.json -- --against strata_verify/golden/reference-cpu.json': Skip(
        LLAMA_SERVER
    ),
    '.venv/bin/python benchmarks/gate_under_load.py --check needle --runs 10 --target llama-server="$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 4 --threads 1 -c 16384 --no-kv-unified --no-webui --no-warmup --override-kv qwen3moe.context_length=int:4096" --out benchmarks/results/gate-load-needle-llama-server.json': Skip(
        LLAMA_SERVER
    ),
    '.venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --target llama-server="$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 4 --threads 1 -c 16384 --no-kv-unified --no-webui --no-warmup --override-kv qwen3moe.context_length=int:4096" --out benchmarks/results/gate-load-interleave-llama-server.json -- --scale 0.05 --lacks give-way': Skip(
        LLAMA_SERVER
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --target vllm=@http://127.0.0.1:8091 --out benchmarks/results/gate-load-interleave-vllm.json -- --scale 0.05 --lacks give-way": Skip(
        "a vLLM server started by hand beside it, and 20 gate runs; " + MINUTES
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check needle --runs 10 --target vllm=@http://127.0.0.1:8091 --out benchmarks/results/gate-load-needle-vllm.json": Skip(
        "a vLLM server started by hand beside it, and 20 gate runs; " + MINUTES
    ),
    "VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --port 8091 &": Skip(
        VLLM_SERVER
    ),
    **{
        f".venv/bin/python benchmarks/gate_under_load.py --check {check} --runs 10 --target vllm=@http://127.0.0.1:8091 --out benchmarks/results/gate-load-{check}-vllm.json{tail}": Skip(
            "a vLLM server started by hand beside it, and 20 gate runs; " + MINUTES
        )
        for check, tail in (
            ("determinism", " -- --against strata_verify/golden/reference-cpu.json"),
            ("answers", ""),
            ("cache", " -- --scale 0.5 --lacks events,give-way"),
        )
    },
}
