"""The check of each command that README.md or a page of docs/*.md shows, by its normalised text
(doc_commands.py), grouped by page. Commands of one file run in order in one scratch directory, so a `report`
finds what the `run` before it wrote; a command that a measurement page shows too runs here, with the first
page that shows it."""

from __future__ import annotations

from doc_checks import (
    CI_GATE,
    INSTALLED,
    INTERLEAVE_SMALL,
    LLAMA_SERVER,
    NO_DEMO_REPEATS,
    OWN_INSTALL,
    PRESET_SMALL,
    SEVERAL_HOSTS,
    SMALL,
    VLLM_SERVER,
    Run,
    Serve,
    Skip,
    WithServer,
)

CHECKS: dict[str, object] = {
    # README.md
    "bash scripts/install.sh && .venv/bin/strata-bench demo": Run((OWN_INSTALL, NO_DEMO_REPEATS)),
    "bash scripts/install.sh --test && .venv/bin/python -m pytest -q -n 2": Skip(INSTALLED),
    "STRATA_PIPED_READ_PIECE=768 .venv/bin/strata-engine serve --split 2 --batch 4 --batch-groups 2 --prefill-chunk 256 --port 0": Serve(),
    ".venv/bin/strata-bench run --arm release='strata-engine serve --split 2 --batch 6 --batch-groups 2' --arm pieces='env STRATA_PIPED_READ_PIECE=1024 strata-engine serve --split 2 --batch 6 --batch-groups 2' --scenarios two_joiners,followup,read_alone --scale 0.05 --repeat 3 --out runs/pieces": Run(
        SMALL
    ),
    ".venv/bin/strata-bench report runs/pieces && .venv/bin/strata-bench plot runs/pieces": Run(),
    ".venv/bin/strata-verify interleave": Run(INTERLEAVE_SMALL),
    ".venv/bin/strata-verify determinism --engine 'strata-engine serve' --against strata_verify/golden/reference-cpu.json": Run(),
    # docs/BATCHING.md
    "python -m strata_engine.executors.sim.calibrate pr2050-2x5090": Run(),
    # docs/BENCH.md
    ".venv/bin/strata-bench demo": Skip("the README's main command runs the same demo (README.md, first block)"),
    ".venv/bin/strata-bench preset pr2050 --time-scale 4 --out bench-out/pr2050": Run(PRESET_SMALL),
    ".venv/bin/strata-bench run --arm release='strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192' --arm piece512='env STRATA_PIPED_READ_PIECE=512 strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192' --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 5 --out bench-out/mine": Run(
        SMALL
    ),
    ".venv/bin/strata-bench report bench-out/mine": Run(),
    ".venv/bin/strata-bench plot bench-out/mine": Run(),
    ".venv/bin/strata-bench load --arm strata='strata-engine serve --layout plain --batch 8' --concurrency 1,2,4,8 --requests 16 --warmup 1 --input-len 256 --output-len 64 --keepalive --slo-ttft-ms 1000 --slo-tpot-ms 100 --out bench-out/load-sweep": Run(
        (
            (r"--concurrency 1,2,4,8", "--concurrency 1,2"),
            (r"--requests 16", "--requests 2"),
            (r"--output-len 64", "--output-len 4"),
        )
    ),
    ".venv/bin/strata-bench load-report bench-out/load-sweep --plot bench-out/load-sweep/sweep.png": Run(),
    # agent sessions
    ".venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents --arm strata='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm nocache='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192 --prompt-cache 0'": Run(
        rewrite=((r"--repeat 2", "--repeat 1"), (r"--scale 0\.125", "--scale 0.0625")), timeout=900
    ),
    # docs/DISTRIBUTED.md
    "strata-engine serve --split 2 --batch 6 --batch-groups 2 --stage-workers dist": Serve(),
    **{
        command: Skip(SEVERAL_HOSTS)
        for command in (
            "export MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=3",
            'RANK=0 strata-engine serve --split 12 --batch 6 --batch-groups 2 --stage-workers dist --stage-ranks join --devices cuda:0,cuda:0 --host 0.0.0.0 --api-key "$KEY" &',
            "RANK=1 strata-engine stage &",
            "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=3 RANK=2 strata-engine stage --device cuda:0 --model /models/m",
            'A="--nnodes 3 --nproc-per-node 1 --master-addr 10.0.0.1 --master-port 29500"',
            "torchrun $A --node-rank 0 -m strata_engine.cli serve --split 12 --batch-groups 2 --stage-workers dist --stage-ranks join ...",
            "torchrun $A --node-rank 1 -m strata_engine.cli stage",
            "torchrun $A --node-rank 2 -m strata_engine.cli stage",
        )
    },
    # docs/ENGINES.md
    "bash scripts/install_llama_cpp.sh": Skip("CI runs it itself (.ci/run), before the tests"),
    ".venv/bin/strata-engine export --gguf /tmp/strata-tiny-moe.gguf": Run(
        ((r"/tmp/strata-tiny-moe.gguf", "strata-tiny-moe.gguf"),)
    ),
    **{
        command: Skip(LLAMA_SERVER)
        for command in (
            "LS=~/.cache/strata/llama.cpp-0.3.36/build/bin/llama-server",
            ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --arm strata='strata-engine serve --layout plain --batch 6 --ctx 8192' --arm llamacpp=\"$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 6 -c 49152 --no-kv-unified --no-webui --override-kv qwen3moe.context_length=int:8192\"",
            "$LS -m /tmp/strata-tiny-moe.gguf --port 8090 --parallel 4 -c 32768 --no-kv-unified &",
            ".venv/bin/strata-verify interleave --url http://127.0.0.1:8090 --scale 0.05",
            ".venv/bin/strata-verify determinism --url http://127.0.0.1:8090 --against strata_verify/golden/reference-cpu.json",
        )
    },
    # vLLM as a peer: tests/verify/test_vllm_verify.py and tests/bench/test_vllm.py run the same commands
    # against the session's vLLM server, in CI's slow tests
    "bash scripts/install_vllm.sh": Skip("CI runs it itself (.ci/run), before the tests"),
    "VLLM=~/.cache/strata/vllm-0.32.0/venv/bin/vllm": Skip("sets a shell variable for the commands after it"),
    "VLLM_CPU_KVCACHE_SPACE=2 $VLLM serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --port 8091 &": Skip(
        VLLM_SERVER
    ),
    ".venv/bin/strata-verify interleave --url http://127.0.0.1:8091 --scale 0.05 --lacks give-way": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server (exit 0)"
    ),
    ".venv/bin/strata-verify determinism --url http://127.0.0.1:8091 --against strata_verify/golden/reference-cpu.json": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server"
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --arm strata='strata-engine serve --layout plain --batch 6 --ctx 8192' --arm vllm=@http://127.0.0.1:8091": Skip(
        "tests/bench/test_vllm.py runs a Strata arm and a vLLM arm and checks the tokens compared"
    ),
    # docs/MODEL.md
    ".venv/bin/python scripts/train_tiny_moe.py --out strata_engine/models/strata-tiny-moe --steps 1400 --time-budget-min 18 --threads 1": Skip(
        "trains for 18 minutes and overwrites the shipped model; the model card records its run"
    ),
    # docs/SERVER.md
    ".venv/bin/strata-engine tune --batch 6": Skip(
        "it writes this machine's profile, which the gate's servers then follow; "
        "tests/engine/test_machine_profile.py runs it (slow) in a cache folder of its own"
    ),
    "strata-engine serve": Serve(),
    "strata-engine serve --executor sim --port 0": Serve(),
    "strata-engine serve --batch 6 --split 2 --batch-groups auto --prefill-chunk 256 --ctx 65536": Serve(),
    "STRATA_PIPED_READ_PIECE=2048 strata-engine serve --split 2 --batch-groups 2": Serve(),
    'strata-engine serve --host 0.0.0.0 --api-key "$KEY"': Serve(),
    'strata-engine generate "def fib(n):" --max-tokens 64': Run(),
    "strata-engine generate 72,101,108 --prompt-ids --show-ids --executor sim --ignore-eos": Run(),
    'curl -s $U/v1/completions -H \'Content-Type: application/json\' -d \'{"prompt": "Hello", "max_tokens": 4, "temperature": 0, "return_token_ids": true}\'': WithServer(),
    'curl -sN $U/v1/completions -H \'Content-Type: application/json\' -d \'{"prompt": [72, 105], "max_tokens": 2, "temperature": 0, "stream": true, "return_token_ids": true}\'': WithServer(),
    'curl -s $U/v1/chat/completions -H \'Content-Type: application/json\' -d \'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}\'': WithServer(),
    "curl -s $U/v1/models": WithServer(),
    "curl -s $U/v1/engine": WithServer(),
    "curl -s $U/health": WithServer(),
    'curl -s -D - "$U/v1/events?since=0"': WithServer(),
    'curl -sN "$U/v1/events?since=12&follow=1"': Skip(
        "stays open by design (a follow feed); tests/engine/test_server_api.py follows it"
    ),
    'curl -s $U/v1/completions -d \'{"prompt": "x", "max_tokens": -1}\'': WithServer(),
    # docs/VERIFY.md
    "strata-verify interleave --scale 0.05": Run(),
    "strata-verify answers": Run(),
    "strata-verify kv-quality --kv-dtype q8": Run(),
    ".venv/bin/strata-verify answers --junit runs/verify/answers.xml": Skip(CI_GATE),
    ".venv/bin/strata-verify answers --engine 'strata-engine serve --layout fastest' --junit runs/verify/answers-default.xml": Skip(
        CI_GATE
    ),
    ".venv/bin/strata-verify needle --engine 'strata-engine serve --layout fastest' --junit runs/verify/needle.xml": Skip(
        CI_GATE
    ),
    "strata-verify determinism --against strata_verify/golden/reference-cpu.json": Skip(
        "the README's determinism command runs the same check on the same default engine"
    ),
    "strata-verify builds --engine release='strata-engine serve' --engine piece='env STRATA_PIPED_READ_PIECE=16384 strata-engine serve --split 2 --batch 4 --batch-groups 2 --ctx 65536'": Skip(
        "two builds, each interleaved and determined (~5 min at CI scale); tests/verify/test_verify_builds_gate.py checks its verdicts and docs/VERIFY.md shows a measured run"
    ),
    ".venv/bin/strata-verify interleave --scale 0.05 --junit runs/verify/interleave.xml": Skip(CI_GATE),
    ".venv/bin/strata-verify determinism --engine 'strata-engine serve' --against strata_verify/golden/reference-cpu.json --junit runs/verify/determinism.xml": Skip(
        CI_GATE
    ),
    "strata-verify determinism --engine 'strata-engine serve' --save manifest-v0.1.0-cpu.json": Run(),
    "strata-verify interleave --scale 0.05 --engine 'python tests/verify/fault_proxy.py --mode perturb --request C --index 3 -- strata-engine serve --split 2 --batch 4 --batch-groups 2'": Run(
        exit_code=1
    ),
    "strata-verify cache": Run(timeout=900),
    "strata-verify needle": Run(timeout=900),
    ".venv/bin/strata-verify cache --junit runs/verify/cache.xml": Skip(CI_GATE),
    ".venv/bin/strata-verify kv-quality --kv-dtype q8 --junit runs/verify/kv-quality-q8.xml": Skip(CI_GATE),
    ".venv/bin/strata-verify kv-quality --kv-dtype k8v4 --junit runs/verify/kv-quality-k8v4.xml": Skip(CI_GATE),
}
