"""Checks of the commands first shown in docs/measurements/ pages on the native ops and their ISA levels
(chunk-, decode-, expert-kernel, decode-experts, intel-xeon, isa-levels, ...); merged into measurement_checks."""

from __future__ import annotations

from doc_checks import MINUTES, VLLM_CACHE, Run, Skip

KERNEL_CHECKS: dict[str, object] = {
    # docs/measurements/chunk-kernel.md
    # a read's chunk profiled on one core
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-attention": Run(
        ((r"$", " --repeats 3"),)
    ),
    # reads alone on servers side by side, the kernels on and off
    '.venv/bin/python benchmarks/bench_paired_reads.py --tokens 4096 --rounds 8 --arm "default=strata-engine serve --ctx 8192" --arm "experts-loop=env STRATA_EXPERT_KERNEL=0 strata-engine serve --ctx 8192" --arm "flash=env STRATA_CHUNK_KERNEL=0 strata-engine serve --ctx 8192"': Run(
        ((r"--tokens 4096 --rounds 8", "--tokens 256 --rounds 1"), (r' --arm "flash=[^"]*"', ""))
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
    "env STRATA_COMPILED_GEMMS=template .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx512.json": Skip(
        "compiles the templated step four times and times every engine; bench-model.md's plain command runs small"
    ),
    # docs/measurements/decode-kernel.md
    ".venv/bin/python benchmarks/bench_attention.py --keys 100 --chunks 256": Run(((r"$", " --repeats 3"),)),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/decode-kernel-2 --arm aten="env STRATA_DECODE_KERNEL=0 strata-engine serve --batch 6 --ctx 8192" --arm native="strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/measurements/expert-kernel.md
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-experts": Run(
        ((r"$", " --repeats 3"),)
    ),
    # docs/measurements/intel-xeon.md
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx512 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-intel-avx2-forced --arm default='env ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    "STRATA_COMPILED_GEMMS=template ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/bench_model.py --repeats 5 --out bench-out/bench_model-avx2.json": Skip(
        "the command above at the AVX2 level; tests/engine/test_native_isa_levels.py runs the levels"
    ),
    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 STRATA_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048": Skip(
        "builds the native ops again at -march=x86-64-v3; read-chunk.md's command runs the profile at this level"
    ),
    # the native ops at this CPU's level and at x86-64-v3 and -v2 (isa-levels.md shows them too)
    ".venv/bin/python benchmarks/bench_attention.py --sections 3,4,5 --repeats 9 --chunks 64,256": Run(
        ((r"--repeats 9", "--repeats 1"),)
    ),
    ".venv/bin/python benchmarks/bench_attention.py --isa x86-64-v3 --sections 3,4,5 --repeats 9 --chunks 64,256": Skip(
        "builds every native op again at -march=x86-64-v3 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels' bits"
    ),
    # the chunk op now against the op as a revision had it (--against)
    ".venv/bin/python benchmarks/bench_attention.py --sections 4 --repeats 9 --chunks 64,256 --against b2c574b~1": Run(
        ((r"--repeats 9", "--repeats 1"), (r"--chunks 64,256", "--chunks 64 --chunk-starts 512"))
    ),
    ".venv/bin/python benchmarks/bench_attention.py --isa x86-64-v2 --sections 3,4,5 --repeats 9 --chunks 64,256": Skip(
        "builds every native op again at -march=x86-64-v2 (about a minute a build); "
        "tests/engine/test_native_isa_levels.py checks the levels' bits"
    ),
    # docs/measurements/read-chunk.md
    # a read's chunk profiled on one core
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048": Run(),
    # docs/measurements/weight-layout.md
    ".venv/bin/python benchmarks/bench_weight_layout.py": Run(
        ((r"$", " --threads 1 --rows 16 --steps 4 --repeats 1"),)
    ),
}
