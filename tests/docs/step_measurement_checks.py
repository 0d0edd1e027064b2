"""Checks of the commands first shown in docs/measurements/ pages on the decode step and its layouts
(decode-step, compiled-gemms, merged-decode, whole-decode, stage-workers, ...); merged into measurement_checks."""

from __future__ import annotations

from doc_checks import MINUTES, VLLM_CACHE, Run, Skip

STEP_CHECKS: dict[str, object] = {
    # docs/measurements/batch-invariance.md
    'strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --arm "padded=strata-engine serve --layout plain --batch 6" --arm "unpadded=env STRATA_ROW_TILE=1 strata-engine serve --layout plain --batch 6"': Skip(
        "a 6-run A/B of the row padding in the scenario, minutes (docs/MODEL.md has its table)"
    ),
    # docs/measurements/compiled-gemms.md
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/template-gemms --arm mkl="env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm template="env STRATA_COMPILED_GEMMS=template strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 4,6 --threads 1 --prompt 64 --steps 100 --arms compiled,template": Run(
        ((r"--rows 4,6 --threads 1 --prompt 64 --steps 100", "--rows 2 --threads 1 --prompt 8 --steps 2"),), timeout=300
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
    # docs/measurements/merged-decode.md
    'S="strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile"': Skip(
        "sets a shell variable for the command after it"
    ),
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "groups=$S" --arm "merged=env STRATA_PIPED_DECODE_MERGE=1 $S" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "three fresh engines a round, two of them compiling (~3 min); the MODEL.md steady-decode command runs the same script small"
    ),
    # docs/measurements/stage-workers.md
    ".venv/bin/python benchmarks/bench_ring.py --stage-workers dist --tokens 200": Run(
        ((r"--tokens 200", "--tokens 40"),)
    ),
    ".venv/bin/python benchmarks/bench_pipeline.py --repeat 3 --stage-workers thread,dist --json run.json": Run(
        ((r"--repeat 3", "--repeat 1 --long 600 --tokens 24"),)
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
