"""Checks of the commands first shown in docs/measurements/ pages on whole engines under load (agents, engines-*,
vs-*, read-modes, start-up, http/client overhead, ci-time, ...); merged into measurement_checks."""

from __future__ import annotations

from doc_checks import HTTP_SMALL, INSTALLED, MINUTES, PRESET_SMALL, VLLM_CACHE, Run, Skip

ENGINE_CHECKS: dict[str, object] = {
    # docs/measurements/agents.md
    ".venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out runs/agents-now --arm strata='strata-engine serve --batch 6 --ctx 8192 --prompt-cache 512' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    "V=~/.cache/strata/vllm-0.32.0/venv/bin/vllm": Skip(VLLM_CACHE),
    # docs/measurements/ci-time.md
    'tmp=$(mktemp -d) && git clone -q . "$tmp/c" && cd "$tmp/c" && time CI=true bash .ci/run': Skip(INSTALLED),
    'tmp=$(mktemp -d) && git clone -q . "$tmp/c" && cd "$tmp/c" && ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 CI=true bash .ci/run': Skip(
        INSTALLED
    ),
    # docs/measurements/client-overhead.md
    ".venv/bin/python benchmarks/bench_client_overhead.py --streams 64 --itl-ms 20 --tokens 200": Run(),
    # docs/measurements/default-layout.md
    ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/default-layout-intel --arm default='strata-engine serve --batch 6 --ctx 8192' --arm plain='strata-engine serve --layout plain --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # the default layout against the plain one and vLLM
    "XDG_CACHE_HOME=/tmp/tune-intel TORCHINDUCTOR_CACHE_DIR=~/.cache/strata/inductor .venv/bin/strata-engine tune --batch 6": Skip(
        "tune on the real engine takes a minute or two; tests/engine/test_machine_profile.py runs it (slow)"
    ),
    # docs/measurements/demo.md
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/strata-bench demo": Skip(
        "builds every native op again at -march=x86-64-v3 (about a minute a build), then the demo (~1 min); "
        "README's demo command runs the same preset at this machine's level"
    ),
    # docs/measurements/engines-avx2.md
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-avx2 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-avx2-forced --arm default='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-avx2-forced-2 --arm default='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    # docs/measurements/engines-avx512.md
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-avx512 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    # docs/measurements/engines-table.md
    ".venv/bin/strata-bench preset engines --arms strata-default,strata-release,vllm,llama-server --repeat 3 --out runs/engines-table-intel": Skip(
        "36 engine runs with vLLM and llama-server, ~8 min quiet; tests/bench/test_preset_engines.py checks its arms"
    ),
    # docs/measurements/http-overhead.md
    ".venv/bin/python benchmarks/bench_http_overhead.py": Run(HTTP_SMALL),
    ".venv/bin/python benchmarks/bench_http_overhead.py --time-scale 100 --max-tokens 1024 --out bench-out/stress.json": Run(),
    ".venv/bin/python benchmarks/bench_http_overhead.py --render bench-out/http_overhead.json": Run(),
    # docs/measurements/many-agents.md
    'git worktree add --detach ../before d04c485 && ln -s "$PWD/.venv" ../before/.venv': Skip(
        "makes a worktree of an older commit for the A/B below"
    ),
    ".venv/bin/strata-bench run --scenarios many_agents --scale 0.125 --repeat 3 --out runs/many-agents-window --arm before=\"env PYTHONPATH=$PWD/../before .venv/bin/strata-engine serve --batch 6 --ctx 16384 --prompt-cache 512\" --arm after='strata-engine serve --batch 6 --ctx 16384 --prompt-cache 512'": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios many_agents --scale 0.0625 --repeat 3 --out runs/many-agents --arm strata='strata-engine serve --batch 6 --ctx 8192 --prompt-cache 512' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios many_agents --scale 0.0625 --repeat 3 --out runs/many-agents-batch24 --arm strata='strata-engine serve --batch 24 --ctx 8192 --prompt-cache 512' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 24 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios many_agents --scale 0.0625 --repeat 3 --out runs/many-agents-batch24-avx2 --arm strata='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 24 --ctx 8192 --prompt-cache 512' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 24 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    # docs/measurements/pr2050-sim.md
    ".venv/bin/strata-bench preset pr2050 --time-scale 4 --out bench-out/pr2050-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/pr2050-ts4": Run(),
    # docs/measurements/read-modes.md
    ".venv/bin/strata-bench preset read-modes --time-scale 4 --out bench-out/read-modes-sim-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench preset read-modes-cpu --out bench-out/read-modes-cpu": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/read-modes-sim-ts4": Run(),
    'for m in STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100 \'STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100\'; do .venv/bin/strata-verify interleave --scale 0.05 --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" .venv/bin/strata-verify determinism --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" --against strata_verify/golden/reference-cpu.json done': Skip(
        "six engines (interleave and determinism for each of three modes, ~8 min); tests/engine/test_pieces_e2e.py checks the same modes' tokens against solo runs"
    ),
    # docs/measurements/spec-sizes-cpu.md
    ".venv/bin/strata-bench preset pr2050-cpu --repeat 3 --out runs/pr2050-cpu-3": Run(PRESET_SMALL),
    # docs/measurements/start-up.md
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_start.py --warm 2 --installed": Skip(
        "builds the six native ops at -march=x86-64-v3 into empty folders and compiles the step three times (~3 min); "
        "the --installed command above runs the script small"
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 2 --installed": Skip(
        "builds the six native ops into empty folders and compiles the step three times (~2 min); the --installed "
        "command above runs the script small"
    ),
    # docs/measurements/vs-aiperf.md
    ".venv/bin/python benchmarks/bench_vs_aiperf.py --aiperf ~/.cache/strata/aiperf-venv/bin/aiperf --engine 'strata-engine serve --layout plain --batch 8' --concurrency 4 --requests 40 --rounds 4 --warmup 2 --out bench-out/vs-aiperf": Skip(
        MINUTES + "; without AIPerf it prints that it skipped (tests/bench/test_vs_aiperf_parts.py)"
    ),
    # docs/measurements/verify-timing.md
    ".venv/bin/strata-verify interleave --scale 0.05": Run(),
    ".venv/bin/strata-verify answers": Run(),
}
