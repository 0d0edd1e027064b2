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
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --streams 4 --tokens 300 --arm "default=strata-engine serve --batch 6 --ctx 8192" --arm "plain=strata-engine serve --layout plain --batch 6 --ctx 8192" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "three fresh engines a round, the default compiling, one vLLM (~4 min); the MODEL.md steady-decode command runs the same script small"
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
    ".venv/bin/python benchmarks/bench_pipeline.py --compile --skip-pause --repeat 1 --batch 8 --stage-workers thread,dist": Run(
        ((r"--compile ", ""), (r"--batch 8", "--batch 4 --tokens 24"))
    ),
}
