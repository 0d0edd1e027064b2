"""Checks of the commands first shown in docs/measurements/ pages on the KV cache (kv-formats, kv-memory,
prompt-cache); merged into measurement_checks."""

from __future__ import annotations

from doc_checks import Run, Skip

KV_CHECKS: dict[str, object] = {
    # docs/measurements/kv-formats.md
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
    ".venv/bin/python benchmarks/bench_import_rss.py": Run(),
    ".venv/bin/python benchmarks/bench_import_rss.py --aot": Run(timeout=900),
    # docs/measurements/README.md: keeping a script's output
    ".venv/bin/python scripts/measurements.py record import-rss -- .venv/bin/python benchmarks/bench_import_rss.py": Skip(
        "rewrites the kept benchmarks/results/import-rss.json that kv-memory.md renders; the command inside runs "
        "above, and tests/docs/test_measurement_tables.py records a run into a temporary folder"
    ),
    # docs/measurements/prompt-cache.md
    ".venv/bin/python benchmarks/bench_prompt_cache.py --rounds 3 --out runs/prompt_cache.json": Run(
        ((r"--rounds 3", "--rounds 1 --context 1100"),), timeout=900
    ),
}
