"""The check of each command first shown in a page of docs/measurements/, by its normalised text
(doc_commands.py), grouped by page. Most reproduce a measurement that takes minutes and are skipped, naming
what checks the same code small; the rest run at a small size. Commands of one file run in order in one
scratch directory, so a `report` finds what the `run` before it wrote. The gate's pages have their own module
(gate_measurement_checks.py); CHECKS holds both."""

from __future__ import annotations

from doc_checks import HTTP_SMALL, INSTALLED, LLAMA_SERVER, MINUTES, PRESET_SMALL, VLLM_CACHE, Run, Skip
from gate_measurement_checks import GATE_CHECKS

_PAGES: dict[str, object] = {
    # docs/measurements/agents.md
    "V=~/.cache/strata/vllm-0.32.0/venv/bin/vllm": Skip(VLLM_CACHE),
    ".venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents-vllm --arm strata='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # the agents re-measured
    'F="env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile"': Skip(
        "sets a shell variable for the command after it"
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents-vllm-2 --arm fastest="$F --prefill-chunk 256" --arm target40="env STRATA_PIPED_PAUSE_TARGET_MS=40 $F --prefill-chunk 256" --arm c128="$F --prefill-chunk 128" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # the agents with the merged decode and smaller chunks; the merged decode's steady rate
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out runs/agents-merged --arm c128="$F --prefill-chunk 128" --arm c128-merged="env STRATA_PIPED_DECODE_MERGE=1 $F --prefill-chunk 128" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 3 --out runs/agents-c64 --arm agents="env STRATA_PIPED_DECODE_MERGE=1 $F --prefill-chunk 64" --arm c64-groups="$F --prefill-chunk 64" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 3 --out runs/agents-c32 --arm c32="$F --prefill-chunk 32" --arm c64="$F --prefill-chunk 64" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/measurements/decode-experts.md
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 1,4,6 --threads 1 --steps 30 --arms template-every,template,template-every,template": Run(
        (
            (r"--rows 1,4,6", "--rows 1"),
            (r"--steps 30", "--steps 2"),
            (r"template-every,template,template-every,template", "template-every"),
        )
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/profile_decode_step.py --rows 1,4,6 --threads 1 --steps 30 --arms template-every,template,template-every,template": Skip(
        "builds the native ops again at -march=x86-64-v3 and compiles the step twice a row count; the command above "
        "runs the script small, tests/engine/test_native_isa_levels.py the op at every level"
    ),
    "env STRATA_COMPILED_GEMMS=template ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx2.json": Skip(
        "builds the native ops again at -march=x86-64-v3 and compiles the templated step four times; bench-model.md's "
        "plain command runs the script small"
    ),
    "env STRATA_DECODE_EXPERTS_KERNEL=0 STRATA_COMPILED_GEMMS=template .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx512-every.json": Skip(
        "compiles the templated step four times (~2 min) and times every engine; bench-model.md's plain command runs the script small"
    ),
    "env STRATA_DECODE_EXPERTS_KERNEL=0 STRATA_COMPILED_GEMMS=template ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx2-every.json": Skip(
        "builds the native ops again at -march=x86-64-v3 and compiles the templated step four times; bench-model.md's "
        "plain command runs the script small"
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx512-2 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx2-forced-3 --arm default='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/measurements/batch-invariance.md
    'strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --arm "padded=strata-engine serve --layout plain --batch 6" --arm "unpadded=env STRATA_ROW_TILE=1 strata-engine serve --layout plain --batch 6"': Skip(
        "a 6-run A/B of the row padding in the scenario, minutes (docs/MODEL.md has its table)"
    ),
    # docs/measurements/bench-model.md
    ".venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx512.json": Skip(
        "the same script as the command above (which runs it at one repeat), at five repeats"
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx2.json": Skip(
        "builds the native ops again at -march=x86-64-v3; the command above runs the script, "
        "tests/engine/test_native_isa_levels.py the levels"
    ),
    ".venv/bin/python benchmarks/bench_model.py --repeats 7 --out bench-out/bench_model.json": Run(
        ((r"--repeats 7", "--repeats 1"),)
    ),
    "env STRATA_COMPILED_GEMMS=template .venv/bin/python benchmarks/bench_model.py --repeats 3 --batch 6 --out bench-out/bench_model-template.json": Skip(
        "compiles the templated step four times (~2 min) and times every engine; the plain bench_model command above runs small"
    ),
    # docs/measurements/chunk-kernel.md
    ".venv/bin/python benchmarks/bench_attention.py --keys 100 --chunks 64,256": Run(((r"$", " --repeats 3"),)),
    # a read's chunk profiled on one core
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-attention": Run(
        ((r"$", " --repeats 3"),)
    ),
    # reads alone on servers side by side, the kernels on and off
    '.venv/bin/python benchmarks/bench_paired_reads.py --tokens 4096 --rounds 8 --arm "default=strata-engine serve --ctx 8192" --arm "experts-loop=env STRATA_EXPERT_KERNEL=0 strata-engine serve --ctx 8192" --arm "flash=env STRATA_CHUNK_KERNEL=0 strata-engine serve --ctx 8192"': Run(
        ((r"--tokens 4096 --rounds 8", "--tokens 256 --rounds 1"), (r' --arm "flash=[^"]*"', ""))
    ),
    # the chunk op's running maxima: two builds side by side (the commit before as a worktree)
    "git worktree add /tmp/strata-before 3cfbddd": Skip(
        "makes a worktree of an earlier commit; the A/B below reads it"
    ),
    '.venv/bin/python benchmarks/bench_paired_reads.py --tokens 2048 --rounds 16 --arm "after=strata-engine serve --layout fastest --batch 6 --ctx 8192" --arm "before=env PYTHONPATH=/tmp/strata-before strata-engine serve --layout fastest --batch 6 --ctx 8192"': Skip(
        "needs the worktree above; " + MINUTES + "; the same script runs small in the check above"
    ),
    # docs/measurements/ci-time.md
    'tmp=$(mktemp -d) && git clone -q . "$tmp/c" && cd "$tmp/c" && time CI=true bash .ci/run': Skip(INSTALLED),
    'tmp=$(mktemp -d) && git clone -q . "$tmp/c" && cd "$tmp/c" && ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 CI=true bash .ci/run': Skip(
        INSTALLED
    ),
    # docs/measurements/client-overhead.md
    ".venv/bin/python benchmarks/bench_client_overhead.py --streams 64 --itl-ms 20 --tokens 200": Run(),
    # docs/measurements/compiled-gemms.md
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/template-gemms --arm mkl="env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm template="env STRATA_COMPILED_GEMMS=template strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 4,6 --threads 1 --prompt 64 --steps 100 --arms compiled,template": Run(
        ((r"--rows 4,6 --threads 1 --prompt 64 --steps 100", "--rows 2 --threads 1 --prompt 8 --steps 2"),), timeout=300
    ),
    # docs/measurements/decode-kernel.md
    ".venv/bin/python benchmarks/bench_attention.py --keys 100 --chunks 256": Run(((r"$", " --repeats 3"),)),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/decode-kernel-2 --arm aten="env STRATA_DECODE_KERNEL=0 strata-engine serve --batch 6 --ctx 8192" --arm native="strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/measurements/decode-step.md
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 1,6 --threads 1,2 --steps 30": Run(
        ((r"--threads 1,2 --steps 30", "--threads 1 --steps 2 --arms invariant,padding_off"),)
    ),
    ".venv/bin/py-spy record -p <pid> -d 8 -r 200 -f raw -o serve.raw --threads": Skip(
        "a profile of a running server's process (<pid>), py-spy installed by hand; docs/MODEL.md has its numbers"
    ),
    ".venv/bin/python benchmarks/bench_attention.py": Run(((r"$", " --repeats 3"),)),
    # steady decode in the layouts that might use both cores, against vLLM
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "c1=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "c2=env STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --threads 2" --arm "c2p=env OMP_WAIT_POLICY=PASSIVE STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --threads 2" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "four fresh engines a round, three of them compiling, one vLLM (~4 min); the MODEL.md steady-decode command runs the same script small"
    ),
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --streams 4 --tokens 300 --arm "c1=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "d1=strata-engine serve --batch 6 --ctx 8192 --compile --stage-workers dist --threads 1" --arm "d2=env STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --stage-workers dist --threads 2" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "four fresh engines a round, three of them compiling, one vLLM (~3 min); the MODEL.md steady-decode command runs the same script small"
    ),
    # steady decode: Strata's eager one-stage arm alone, small (the vLLM arm needs its venv)
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "one-stage=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "spec=strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Run(
        (
            (r' --arm "spec=[^"]*" --arm "vllm=[^"]*"', ""),
            (r" --compile", ""),
            (r"--rounds 2", "--rounds 1 --streams 2 --tokens 16"),
        ),
        timeout=300,
    ),
    # docs/measurements/decode-threads.md
    'strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --arm "strata-default=strata-engine serve --layout plain --batch 6" --arm "strata-compile=strata-engine serve --batch 6 --compile" --arm "strata-mixed=env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 <vllm venv>/bin/vllm serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        "a 12-run comparison with vLLM's CPU build (scripts/install_vllm.sh; <vllm venv> is its venv), minutes"
    ),
    # docs/measurements/default-layout.md
    # the default layout against the plain one and vLLM
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-default --arm default="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm plain="strata-engine serve --layout plain --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-default-2 --arm default="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm pt80="env STRATA_PIPED_PAUSE_TARGET_MS=80 env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-threads --arm default="env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm ranks="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    "XDG_CACHE_HOME=/tmp/tunex TORCHINDUCTOR_CACHE_DIR=~/.cache/strata/inductor .venv/bin/strata-engine tune --batch 6": Skip(
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
    ".venv/bin/strata-bench preset engines --arms strata-release,strata-fastest,strata-fastest-mkl,vllm,llama-server --repeat 3 --out runs/engines-chunk": Skip(
        "45 engine runs, ~19 min; tests/bench/test_preset_engines.py checks its arms, what it leaves out and why"
    ),
    # docs/measurements/expert-kernel.md
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-experts": Run(
        ((r"$", " --repeats 3"),)
    ),
    # docs/measurements/http-overhead.md
    ".venv/bin/python benchmarks/bench_http_overhead.py": Run(HTTP_SMALL),
    ".venv/bin/python benchmarks/bench_http_overhead.py --time-scale 100 --max-tokens 1024 --out bench-out/stress.json": Run(),
    ".venv/bin/python benchmarks/bench_http_overhead.py --render bench-out/http_overhead.json": Run(),
    # docs/measurements/intel-xeon.md
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx512 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx2-forced --arm default='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    "env STRATA_COMPILED_GEMMS=template .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx512.json": Skip(
        "compiles the templated step four times and times every engine; bench-model.md's plain command runs small"
    ),
    "STRATA_COMPILED_GEMMS=template ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx2.json": Skip(
        "the command above at the AVX2 level; tests/engine/test_native_isa_levels.py runs the levels"
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048": Skip(
        "builds the native ops again at -march=x86-64-v3; read-chunk.md's command runs the profile at this level"
    ),
    # docs/measurements/isa-levels.md
    # the native ops at this CPU's level and at x86-64-v2, the default server against vLLM
    ".venv/bin/python benchmarks/bench_attention.py --sections 3,4 --repeats 9 --chunks 64,256": Run(
        ((r"--repeats 9", "--repeats 1"),)
    ),
    ".venv/bin/python benchmarks/bench_attention.py --isa x86-64-v3 --sections 3,4 --repeats 9 --chunks 64,256": Skip(
        "builds every native op again at -march=x86-64-v3 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels' bits"
    ),
    # docs/measurements/intel-xeon.md: the chunk op now against the op as a revision had it (--against)
    ".venv/bin/python benchmarks/bench_attention.py --sections 4 --repeats 9 --chunks 64,256 --against b2c574b~1": Run(
        ((r"--repeats 9", "--repeats 1"), (r"--chunks 64,256", "--chunks 64 --chunk-starts 512"))
    ),
    **{
        f".venv/bin/python benchmarks/bench_attention.py --isa {level} --sections {sections} --repeats 9{rest} --against {rev}": Skip(
            f"builds the op at -march={level} here and as {rev} had it (about a minute a build); the same "
            "comparison at this CPU's level runs above"
        )
        for level, sections, rest, rev in (
            ("x86-64-v3", "4", " --chunks 64,256", "b2c574b~1"),
            ("x86-64-v3", "4", " --chunks 64,256", "3e384b0~1"),
            ("x86-64-v2", "4", " --chunks 64,256", "b2c574b~1"),
            ("x86-64-v3", "3", "", "3e384b0~1"),
            ("x86-64-v3", "5", "", "3e384b0~1"),
        )
    },
    ".venv/bin/python benchmarks/bench_attention.py --isa x86-64-v3 --sections 5 --repeats 9": Skip(
        "builds the quantized decode op at -march=x86-64-v3 (about a minute); test_native_isa_levels.py checks its bits"
    ),
    ".venv/bin/python benchmarks/bench_attention.py --isa x86-64-v2 --sections 3,4 --repeats 9 --chunks 64,256": Skip(
        "builds every native op again at -march=x86-64-v2 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels' bits"
    ),
    'python3 - <<\'PY\' import json d = json.load(open("strata_bench/presets/engines.json")) json.dump({"name": "default-vs-vllm", '
    '"arms": {"strata-default": "strata-engine serve --batch 6 --ctx 8192", "vllm": d["arms"]["vllm"]}, '
    '"scenarios": d["scenarios"], "repeat": 3, "scale": d["scale"]}, open("/tmp/default-vs-vllm.json", "w")) PY': Run(),
    ".venv/bin/strata-bench preset /tmp/default-vs-vllm.json --out runs/default-vs-vllm-avx2": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/measurements/kv-formats.md
    ".venv/bin/python benchmarks/bench_kv_formats.py --threads 1": Run(
        ((r"--threads 1$", "--threads 1 --far 3000 --at 1100 --read-at 1200 --chunk 64 --steps 2 --rounds 1"),)
    ),
    ".venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --positions 2048,131000 --far 4096 --rounds 4": Run(
        (
            (
                r"--positions 2048,131000 --far 4096 --rounds 4$",
                "--positions 1100,3000 --far 3000 --at 1100 --read-at 1200 --chunk 64 --steps 2 --rounds 1",
            ),
        )
    ),
    ".venv/bin/strata-verify kv-quality --kv-dtype q8": Run(),
    ".venv/bin/strata-verify kv-quality --kv-dtype k8v4": Run(),
    ".venv/bin/strata-verify kv-quality --kv-dtype bf16": Run(),
    ".venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --rounds 4": Run(
        (
            (
                r"--threads 1 --rounds 4$",
                "--threads 1 --far 3000 --at 1100 --read-at 1200 --chunk 64 --steps 2 --rounds 1",
            ),
        )
    ),
    ".venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --rounds 16": Run(
        (
            (
                r"--threads 1 --rounds 16$",
                "--threads 1 --far 3000 --at 1100 --read-at 1200 --chunk 64 --steps 2 --rounds 1",
            ),
        )
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --rounds 16": Skip(
        "builds every native op again at -march=x86-64-v3 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels"
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_kv_formats.py --threads 1 --rounds 4": Skip(
        "builds every native op again at -march=x86-64-v3 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels"
    ),
    # docs/measurements/kv-memory.md
    ".venv/bin/python benchmarks/bench_start.py --warm 0 --read 45000 --decode 16 -- --batch 4 --ctx 131072": Run(
        ((r"--read 45000 --decode 16 -- --batch 4 --ctx 131072$", "--read 300 --decode 4 -- --executor sim --batch 4"),)
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 0 --read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072": Run(
        (
            (
                r"--read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072$",
                "--read 300 --decode 4 -- --layout plain --executor sim --batch 4",
            ),
        )
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 0 --read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072 --kv-dtype k8v4": Run(
        (
            (
                r"--read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072 --kv-dtype k8v4$",
                "--read 300 --decode 4 -- --layout plain --executor sim --batch 4",
            ),
        )
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 0 --read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072 --kv-dtype q8": Run(
        (
            (
                r"--read 45000 --decode 16 -- --layout plain --batch 4 --ctx 131072 --kv-dtype q8$",
                "--read 300 --decode 4 -- --layout plain --executor sim --batch 4",
            ),
        )
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 1 --read 45000 -- --layout plain --batch 4": Run(
        ((r"--warm 1 --read 45000 -- --layout plain --batch 4$", "--warm 0 --read 300 -- --executor sim --batch 4"),)
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 1 --read 45000 -- --batch 4 --ctx 131072": Run(
        ((r"--warm 1 --read 45000 -- --batch 4 --ctx 131072$", "--warm 0 --read 300 -- --executor sim --batch 4"),)
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 1 --read 45000 -- --layout plain --batch 4 --ctx 131072": Run(
        (
            (
                r"--warm 1 --read 45000 -- --layout plain --batch 4 --ctx 131072$",
                "--warm 0 --read 300 -- --layout plain --executor sim --batch 4",
            ),
        )
    ),
    ".venv/bin/python benchmarks/bench_import_rss.py": Run(),
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
    # docs/measurements/merged-decode.md
    'S="strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile"': Skip(
        "sets a shell variable for the command after it"
    ),
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "groups=$S" --arm "merged=env STRATA_PIPED_DECODE_MERGE=1 $S" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "three fresh engines a round, two of them compiling (~3 min); the MODEL.md steady-decode command runs the same script small"
    ),
    # docs/measurements/pr2050-sim.md
    ".venv/bin/strata-bench preset pr2050 --time-scale 4 --out bench-out/pr2050-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/pr2050-ts4": Run(),
    # docs/measurements/prompt-cache.md
    ".venv/bin/python benchmarks/bench_prompt_cache.py --rounds 3 --out runs/prompt_cache.json": Run(
        ((r"--rounds 3", "--rounds 1 --context 1100"),), timeout=900
    ),
    # docs/measurements/read-chunk.md
    # a read's chunk profiled on one core
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048": Run(),
    # docs/measurements/read-modes.md
    ".venv/bin/strata-bench preset read-modes --time-scale 4 --out bench-out/read-modes-sim-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench preset read-modes-cpu --out bench-out/read-modes-cpu": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/read-modes-sim-ts4": Run(),
    'for m in STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100 \'STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100\'; do .venv/bin/strata-verify interleave --scale 0.05 --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" .venv/bin/strata-verify determinism --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" --against strata_verify/golden/reference-cpu.json done': Skip(
        "six engines (interleave and determinism for each of three modes, ~8 min); tests/engine/test_pieces_e2e.py checks the same modes' tokens against solo runs"
    ),
    # docs/measurements/spec-sizes-cpu.md
    ".venv/bin/strata-bench preset pr2050-cpu --out bench-out/pr2050-cpu": Run(PRESET_SMALL),
    # docs/measurements/stage-workers.md
    ".venv/bin/python benchmarks/bench_ring.py --stage-workers dist --tokens 200": Run(
        ((r"--tokens 200", "--tokens 40"),)
    ),
    ".venv/bin/python benchmarks/bench_pipeline.py --repeat 3 --stage-workers thread,dist --json run.json": Run(
        ((r"--repeat 3", "--repeat 1 --long 600 --tokens 24"),)
    ),
    # docs/measurements/start-up.md
    "X=$(mktemp -d) T=$(mktemp -d) && time XDG_CACHE_HOME=$X TORCH_EXTENSIONS_DIR=$T .venv/bin/python -m strata_engine.runtime.native --jobs 1": Skip(
        "builds the native ops from empty folders one after another (~2 min); test_native_prebuild.py covers --jobs"
    ),
    "X=$(mktemp -d) T=$(mktemp -d) && time XDG_CACHE_HOME=$X TORCH_EXTENSIONS_DIR=$T .venv/bin/python -m strata_engine.runtime.native": Skip(
        "builds the native ops from empty folders side by side (~1 min); scripts/install.sh runs it"
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 2": Run(((r"--warm 2$", "--warm 1 -- --executor sim"),)),
    ".venv/bin/python benchmarks/bench_start.py --warm 0 --installed": Run(
        (
            (
                r"^\.venv",
                "env "
                + " ".join(
                    f"STRATA_{k}_KERNEL=0"
                    for k in ("CHUNK", "EXPERT", "DECODE", "DECODE_EXPERTS", "QUANT_DECODE", "KV_CODEC")
                )
                + " .venv",
            ),
            (r"--installed$", "--installed -- --executor sim"),
        )
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_start.py --warm 2 --installed": Skip(
        "builds the six native ops at -march=x86-64-v3 into empty folders and compiles the step three times (~3 min); "
        "the --installed command above runs the script small"
    ),
    ".venv/bin/python benchmarks/bench_start.py --warm 2 --installed": Skip(
        "builds the six native ops into empty folders and compiles the step three times (~2 min); the --installed "
        "command above runs the script small"
    ),
    "STRATA_COMPILED_GEMMS=aten .venv/bin/python benchmarks/bench_start.py --warm 2 -- --batch 4": Run(
        ((r"--warm 2 -- --batch 4$", "--warm 0 -- --executor sim --batch 4"),)
    ),
    # docs/measurements/vs-aiperf.md
    ".venv/bin/python benchmarks/bench_vs_aiperf.py --engine 'strata-engine serve --layout plain --batch 8' --concurrency 4 --requests 40 --rounds 4 --warmup 2 --out bench-out/vs-aiperf": Skip(
        MINUTES + "; without AIPerf it prints that it skipped (tests/bench/test_vs_aiperf_parts.py)"
    ),
    # docs/measurements/vs-llama-server.md
    ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out bench-out/vs-llama-server --arm release='strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm mixed='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm llamacpp=\"$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 6 -b 512 -c 49152 --no-kv-unified --no-webui --override-kv qwen3moe.context_length=int:8192\"": Skip(
        LLAMA_SERVER
    ),
    # docs/measurements/weight-layout.md
    ".venv/bin/python benchmarks/bench_weight_layout.py": Run(
        ((r"$", " --threads 1 --rows 16 --steps 4 --repeats 1"),)
    ),
    # docs/measurements/whole-decode.md
    # steady decode with the whole decode
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --streams 4 --tokens 300 --arm "default=env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm "ranks=env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # the whole decode against the ranks' hops
    ".venv/bin/python benchmarks/bench_pipeline.py --compile --skip-pause --repeat 1 --batch 8 --stage-workers thread,dist": Skip(
        MINUTES
    ),
}

_TWICE = _PAGES.keys() & GATE_CHECKS.keys()
assert not _TWICE, f"commands checked in both modules: {sorted(_TWICE)}"
CHECKS: dict[str, object] = {**_PAGES, **GATE_CHECKS}
