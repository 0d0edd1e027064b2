"""The shell commands of README.md, docs/*.md and docs/measurements/*.md, and how each one is checked.

`extract()` reads every fenced block tagged `bash` or `sh` and returns its commands: comment lines
dropped, `\\`-continued lines joined, a `for ... done` loop and a here-document (`<<'PY'` ... `PY`) kept whole. `CHECKS` says, for every such
command (normalised: whitespace collapsed, a trailing `# comment` cut), how the docs test runs it:

- `Run(rewrite)`: run it with bash in a scratch directory that links the repository's paths, after the
  listed rewrites (a smaller `--scale`, fewer `--repeat`s) so CI runs it in seconds, not minutes;
- `Serve()`: a server command; it must print its STRATA_READY line and stop on SIGTERM;
- `WithServer()`: needs `$U`, the URL of a running server (a sim engine is started for it);
- `Skip(reason)`: not run here, and why (an install CI already runs, a measurement that takes minutes).

A command in the docs with no entry fails the fast test, so the docs and their checks cannot drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "measurements").glob("*.md")),
]
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
COMMAND_START = re.compile(r"^(\.venv/bin/|strata-|python |bash |env |curl |STRATA_|for |tmp=)")


@dataclass(frozen=True)
class DocCommand:
    path: Path
    line: int
    text: str  # as written, continuations joined with newlines kept

    @property
    def key(self) -> str:
        return normalise(self.text)

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _uncommented(line: str) -> str:
    """A shell line without its trailing comment (the first ` #` outside quotes)."""
    for match in re.finditer(r"[ \t]+#", line):
        before = line[: match.start()]
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return before
    return line


@dataclass(frozen=True)
class Run:
    rewrite: tuple[tuple[str, str], ...] = ()  # (regex, replacement) applied in order
    timeout: float = 600.0
    exit_code: int = 0  # a command the docs show failing on purpose says so here

    def command(self, text: str) -> str:
        if self.rewrite:  # a trailing `# comment` would hide a line's end from the rewrites' `$`
            text = "\n".join(_uncommented(line) for line in text.split("\n"))
        for pattern, replacement in self.rewrite:
            text = re.sub(pattern, replacement, text, flags=re.M)
        return text


@dataclass(frozen=True)
class Serve:
    extra: str = "--port 0"  # appended unless the command already picks its port


@dataclass(frozen=True)
class WithServer:
    timeout: float = 60.0


@dataclass(frozen=True)
class Skip:
    reason: str


@dataclass
class Block:
    path: Path
    line: int
    tag: str
    lines: list[str] = field(default_factory=list)


def normalise(text: str) -> str:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line.rstrip("\\").strip()) if not line.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def blocks(path: Path) -> list[Block]:
    out, current = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            if current is None:
                current = Block(path, number + 1, line[3:].strip())
            else:
                out.append(current)
                current = None
        elif current is not None:
            current.lines.append(line)
    return out


def commands(block: Block) -> list[DocCommand]:
    found, pending, start, depth, heredoc = [], [], 0, 0, None
    for offset, line in enumerate(block.lines):
        stripped = line.strip()
        if heredoc is not None:  # inside a here-document: its lines are the command's, whatever they hold
            pending.append(line)
            if stripped != heredoc:
                continue
            heredoc = None
        else:
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = block.line + offset
            pending.append(line)
            if (match := HEREDOC.search(stripped)) is not None:
                heredoc = match.group(2)
                continue
            depth += len(re.findall(r"^(for|while|if)\b", stripped)) - len(re.findall(r"^(done|fi)\b", stripped))
        if stripped.endswith("\\") or depth > 0:
            continue
        found.append(DocCommand(block.path, start, "\n".join(pending)))
        pending, depth = [], 0
    return found


def extract() -> list[DocCommand]:
    return [c for path in DOCS for b in blocks(path) if b.tag in ("bash", "sh") for c in commands(b)]


def untagged_command_blocks() -> list[str]:
    """Blocks with no language tag that hold commands: tag them bash so the docs test sees them."""
    return [
        f"{b.path.relative_to(ROOT)}:{b.line}"
        for path in DOCS
        for b in blocks(path)
        if b.tag == "" and any(COMMAND_START.match(line.strip()) for line in b.lines)
    ]


CI_SCALE = (r"--scale [0-9.]+", "--scale 0.02")
ONE_REPEAT = (r"--repeat [0-9]+", "--repeat 1")
NO_DEMO_REPEATS = (r"strata-bench demo$", "strata-bench demo --repeat 1")  # --scale would replace its 1/16
OWN_INSTALL = (
    r"^bash scripts/install.sh",
    'bash "$STRATA_ROOT/scripts/install.sh"',
)  # never an editable install of the scratch copy
INSTALLED = "CI runs it itself: .ci/run is the README's test command"
LLAMA_SERVER = (
    "a llama-server session built by scripts/install_llama_cpp.sh (a shell variable, a server left in the "
    "background); tests/bench/test_llama_cpp.py and tests/verify/test_llama_cpp_verify.py run the same bench "
    "and gate against a real llama-server"
)
CI_GATE = "CI's own gate runs exactly this, after the tests (.ci/run)"
VLLM_CACHE = (
    "vLLM's server (minutes to start here); tests/verify/test_verify_cache_engines.py runs the same check on it"
)
SEVERAL_HOSTS = (
    "several hosts at 10.0.0.1 with GPUs; tests/engine/test_dist_rendezvous.py runs the same env:// "
    "rendezvous with separate commands (and torchrun) on one host"
)
MINUTES = "a measurement that takes minutes at the size the docs report; its numbers sit beside it"

SMALL = (CI_SCALE, ONE_REPEAT)
# one scenario (every preset has read_alone): the command, its arms and its report are checked, not the table
PRESET_SMALL = (
    (r"(strata-bench preset \S+( --time-scale \S+)?)", r"\1 --repeat 1 --scale 0.02 --scenarios read_alone"),
)
INTERLEAVE_SMALL = ((r"interleave$", "interleave --scale 0.05"),)
HTTP_SMALL = ((r"bench_http_overhead.py$", "bench_http_overhead.py --max-tokens 64"),)

# Every bash/sh command of the docs, by its normalised text. Commands of one file run in order in one
# scratch directory, so a `report` finds what the `run` before it wrote.
VLLM_SERVER = "a vLLM server for the commands after it; tests/conftest.py's vllm_server fixture starts the same one"

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
    ".venv/bin/strata-bench preset read-modes --time-scale 4 --out bench-out/read-modes-sim-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench preset read-modes-cpu --out bench-out/read-modes-cpu": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/read-modes-sim-ts4": Run(),
    ".venv/bin/strata-bench preset pr2050-cpu --out bench-out/pr2050-cpu": Run(PRESET_SMALL),
    'for m in STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100 \'STRATA_PIPED_READ_MIX=1 STRATA_PIPED_PAUSE_TARGET_MS=100\'; do .venv/bin/strata-verify interleave --scale 0.05 --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" .venv/bin/strata-verify determinism --engine "env $m strata-engine serve --split 2 --batch 4 --batch-groups 2" --against strata_verify/golden/reference-cpu.json done': Skip(
        "six engines (interleave and determinism for each of three modes, ~8 min); tests/engine/test_pieces_e2e.py checks the same modes' tokens against solo runs"
    ),
    "python -m strata_engine.executors.sim.calibrate pr2050-2x5090": Run(),
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
            ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out bench-out/vs-llama-server --arm release='strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm mixed='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm llamacpp=\"$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 6 -b 512 -c 49152 --no-kv-unified --no-webui --override-kv qwen3moe.context_length=int:8192\"",
            ".venv/bin/strata-verify interleave --url http://127.0.0.1:8090 --scale 0.05",
            ".venv/bin/strata-verify determinism --url http://127.0.0.1:8090 --against strata_verify/golden/reference-cpu.json",
        )
    },
    # docs/MODEL.md
    ".venv/bin/python scripts/train_tiny_moe.py --out strata_engine/models/strata-tiny-moe --steps 1400 --time-budget-min 18 --threads 1": Skip(
        "trains for 18 minutes and overwrites the shipped model; the model card records its run"
    ),
    ".venv/bin/python benchmarks/bench_model.py --repeats 7 --out bench-out/bench_model.json": Run(
        ((r"--repeats 7", "--repeats 1"),)
    ),
    "env STRATA_COMPILED_GEMMS=template .venv/bin/python benchmarks/bench_model.py --repeats 3 --batch 6 --out bench-out/bench_model-template.json": Skip(
        "compiles the templated step four times (~2 min) and times every engine; the plain bench_model command above runs small"
    ),
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 1,6 --threads 1,2 --steps 30": Run(
        ((r"--threads 1,2 --steps 30", "--threads 1 --steps 2 --arms invariant,padding_off"),)
    ),
    ".venv/bin/py-spy record -p <pid> -d 8 -r 200 -f raw -o serve.raw --threads": Skip(
        "a profile of a running server's process (<pid>), py-spy installed by hand; docs/MODEL.md has its numbers"
    ),
    'strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --arm "strata-default=strata-engine serve --layout plain --batch 6" --arm "strata-compile=strata-engine serve --batch 6 --compile" --arm "strata-mixed=env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 <vllm venv>/bin/vllm serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        "a 12-run comparison with vLLM's CPU build (scripts/install_vllm.sh; <vllm venv> is its venv), minutes"
    ),
    'strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --arm "padded=strata-engine serve --layout plain --batch 6" --arm "unpadded=env STRATA_ROW_TILE=1 strata-engine serve --layout plain --batch 6"': Skip(
        "a 6-run A/B of the row padding in the scenario, minutes (docs/MODEL.md has its table)"
    ),
    ".venv/bin/python benchmarks/bench_weight_layout.py": Run(
        ((r"$", " --threads 1 --rows 16 --steps 4 --repeats 1"),)
    ),
    ".venv/bin/python benchmarks/bench_attention.py": Run(((r"$", " --repeats 3"),)),
    ".venv/bin/python benchmarks/bench_attention.py --keys 100 --chunks 256": Run(((r"$", " --repeats 3"),)),
    ".venv/bin/python benchmarks/bench_attention.py --keys 100 --chunks 64,256": Run(((r"$", " --repeats 3"),)),
    # docs/BATCHING.md
    ".venv/bin/python benchmarks/bench_ring.py --stage-workers dist --tokens 200": Run(
        ((r"--tokens 200", "--tokens 40"),)
    ),
    ".venv/bin/python benchmarks/bench_pipeline.py --repeat 3 --stage-workers thread,dist --json run.json": Run(
        ((r"--repeat 3", "--repeat 1 --long 600 --tokens 24"),)
    ),
    # docs/BENCH.md
    ".venv/bin/strata-bench demo": Skip("the README's main command runs the same demo (README.md, first block)"),
    ".venv/bin/strata-bench preset pr2050 --time-scale 4 --out bench-out/pr2050": Run(PRESET_SMALL),
    ".venv/bin/strata-bench run --arm release='strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192' --arm piece512='env STRATA_PIPED_READ_PIECE=512 strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192' --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 5 --out bench-out/mine": Run(
        SMALL
    ),
    ".venv/bin/strata-bench report bench-out/mine": Run(),
    ".venv/bin/strata-bench plot bench-out/mine": Run(),
    ".venv/bin/python benchmarks/bench_client_overhead.py --streams 64 --itl-ms 20 --tokens 200": Run(),
    ".venv/bin/strata-bench preset pr2050 --time-scale 4 --out bench-out/pr2050-ts4": Run(PRESET_SMALL),
    ".venv/bin/strata-bench report bench-out/pr2050-ts4": Run(),
    ".venv/bin/strata-bench load --arm strata='strata-engine serve --layout plain --batch 8' --concurrency 1,2,4,8 --requests 16 --warmup 1 --input-len 256 --output-len 64 --keepalive --slo-ttft-ms 1000 --slo-tpot-ms 100 --out bench-out/load-sweep": Run(
        (
            (r"--concurrency 1,2,4,8", "--concurrency 1,2"),
            (r"--requests 16", "--requests 2"),
            (r"--output-len 64", "--output-len 4"),
        )
    ),
    ".venv/bin/strata-bench load-report bench-out/load-sweep --plot bench-out/load-sweep/sweep.png": Run(),
    ".venv/bin/python benchmarks/bench_vs_aiperf.py --engine 'strata-engine serve --layout plain --batch 8' --concurrency 4 --requests 40 --rounds 4 --warmup 2 --out bench-out/vs-aiperf": Skip(
        MINUTES + "; without AIPerf it prints that it skipped (tests/bench/test_vs_aiperf_parts.py)"
    ),
    # docs/SERVER.md
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
    ".venv/bin/python benchmarks/bench_http_overhead.py": Run(HTTP_SMALL),
    ".venv/bin/python benchmarks/bench_http_overhead.py --time-scale 100 --max-tokens 1024 --out bench-out/stress.json": Run(),
    ".venv/bin/python benchmarks/bench_http_overhead.py --render bench-out/http_overhead.json": Run(),
    # docs/VERIFY.md
    "strata-verify interleave --scale 0.05": Run(),
    "strata-verify answers": Run(),
    ".venv/bin/strata-verify answers --junit runs/verify/answers.xml": Skip(CI_GATE),
    ".venv/bin/strata-verify answers --engine 'strata-engine serve' --junit runs/verify/answers-default.xml": Skip(
        CI_GATE
    ),
    ".venv/bin/strata-verify needle --engine 'strata-engine serve' --junit runs/verify/needle.xml": Skip(CI_GATE),
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
    'tmp=$(mktemp -d) && git clone -q . "$tmp/c" && cd "$tmp/c" && time CI=true bash .ci/run': Skip(INSTALLED),
    ".venv/bin/python benchmarks/bench_start.py --warm 2": Run(((r"--warm 2$", "--warm 1 -- --executor sim"),)),
    ".venv/bin/python benchmarks/bench_start.py --warm 1 --read 45000 -- --layout plain --batch 4": Run(
        ((r"--warm 1 --read 45000 -- --layout plain --batch 4$", "--warm 0 --read 300 -- --executor sim --batch 4"),)
    ),
    # docs/measurements/gate-under-load.md: Strata's run checks the script (one quiet run, one "loaded" with no hog)
    ".venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --target strata='env STRATA_PIPED_READ_PIECE=512 strata-engine serve --split 2 --batch 4 --batch-groups 2 --ctx 2048' -- --scale 0.05": Run(
        ((r"--runs 10", "--runs 1 --hogs 0"),)
    ),
    ".venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --target vllm=@http://127.0.0.1:8091 -- --scale 0.05 --lacks give-way": Skip(
        "a vLLM server started by hand beside it, and 20 gate runs; " + MINUTES
    ),
    '.venv/bin/python benchmarks/gate_under_load.py --check interleave --runs 10 --target llama-server="$LS -m /tmp/strata-tiny-moe.gguf --host {host} --port {port} --parallel 4 -c 16384 --no-kv-unified --no-webui --no-warmup --override-kv qwen3moe.context_length=int:4096" -- --scale 0.05 --lacks give-way': Skip(
        LLAMA_SERVER
    ),
    ".venv/bin/strata-verify cache --junit runs/verify/cache.xml": Skip(CI_GATE),
    "V=~/.cache/strata/vllm-0.32.0/venv/bin/vllm": Skip(VLLM_CACHE),
    'strata-verify cache --scale 0.5 --lacks events,give-way --start-timeout 600 --engine "env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details"': Skip(
        VLLM_CACHE
    ),
    # docs/BENCH.md, agent sessions
    ".venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents --arm strata='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm nocache='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192 --prompt-cache 0'": Run(
        rewrite=((r"--repeat 2", "--repeat 1"), (r"--scale 0\.125", "--scale 0.0625")), timeout=900
    ),
    # docs/BATCHING.md
    ".venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents-vllm --arm strata='env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --prefill-chunk 128 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/ENGINES.md and docs/VERIFY.md: vLLM as a peer (tests/verify/test_vllm_verify.py and tests/bench/test_vllm.py
    # run the same commands against the session's vLLM server, in CI's slow tests)
    "bash scripts/install_vllm.sh": Skip("CI runs it itself (.ci/run), before the tests"),
    "VLLM=~/.cache/strata/vllm-0.32.0/venv/bin/vllm": Skip("sets a shell variable for the commands after it"),
    "VLLM_CPU_KVCACHE_SPACE=2 $VLLM serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --port 8091 &": Skip(
        VLLM_SERVER
    ),
    "VLLM_CPU_KVCACHE_SPACE=2 ~/.cache/strata/vllm-0.32.0/venv/bin/vllm serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --port 8091 &": Skip(
        VLLM_SERVER
    ),
    ".venv/bin/strata-verify interleave --url http://127.0.0.1:8091 --scale 0.05 --lacks give-way": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server (exit 0)"
    ),
    ".venv/bin/strata-verify interleave --url http://127.0.0.1:8091 --scale 0.05": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server (exit 1, naming give-way)"
    ),
    ".venv/bin/strata-verify determinism --url http://127.0.0.1:8091 --against strata_verify/golden/reference-cpu.json": Skip(
        "tests/verify/test_vllm_verify.py runs it against the session's vLLM server"
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --arm strata='strata-engine serve --layout plain --batch 6 --ctx 8192' --arm vllm=@http://127.0.0.1:8091": Skip(
        "tests/bench/test_vllm.py runs a Strata arm and a vLLM arm and checks the tokens compared"
    ),
    ".venv/bin/strata-bench run --scenarios many_agents --scale 0.0625 --repeat 3 --out runs/many-agents --arm strata='strata-engine serve --batch 6 --ctx 8192 --prompt-cache 512' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench run --scenarios two_joiners,followup,read_alone --scale 0.0625 --repeat 3 --out runs/engines-avx2 --arm default='strata-engine serve --batch 6 --ctx 8192' --arm vllm=\"env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log\"": Skip(
        MINUTES
    ),
    ".venv/bin/strata-bench preset engines --repeat 3 --out runs/engines-chunk": Skip(
        "45 engine runs, ~19 min; tests/bench/test_preset_engines.py checks its arms, what it leaves out and why"
    ),
    # docs/BATCHING.md, the agents re-measured
    'F="env STRATA_PIPED_READ_MIX=1 strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile"': Skip(
        "sets a shell variable for the command after it"
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out bench-out/agents-vllm-2 --arm fastest="$F --prefill-chunk 256" --arm target40="env STRATA_PIPED_PAUSE_TARGET_MS=40 $F --prefill-chunk 256" --arm c128="$F --prefill-chunk 128" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/BATCHING.md, the agents with the merged decode and smaller chunks; the merged decode's steady rate
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 2 --out runs/agents-merged --arm c128="$F --prefill-chunk 128" --arm c128-merged="env STRATA_PIPED_DECODE_MERGE=1 $F --prefill-chunk 128" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 3 --out runs/agents-c64 --arm agents="env STRATA_PIPED_DECODE_MERGE=1 $F --prefill-chunk 64" --arm c64-groups="$F --prefill-chunk 64" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios agents --scale 0.125 --repeat 3 --out runs/agents-c32 --arm c32="$F --prefill-chunk 32" --arm c64="$F --prefill-chunk 64" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --enable-prompt-tokens-details --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/MODEL.md, steady decode in the layouts that might use both cores, against vLLM
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "c1=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "c2=env STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --threads 2" --arm "c2p=env OMP_WAIT_POLICY=PASSIVE STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --threads 2" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "four fresh engines a round, three of them compiling, one vLLM (~4 min); the MODEL.md steady-decode command runs the same script small"
    ),
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --streams 4 --tokens 300 --arm "c1=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "d1=strata-engine serve --batch 6 --ctx 8192 --compile --stage-workers dist --threads 1" --arm "d2=env STRATA_DECODE_ALL_THREADS=1 strata-engine serve --batch 6 --ctx 8192 --compile --stage-workers dist --threads 2" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "four fresh engines a round, three of them compiling, one vLLM (~3 min); the MODEL.md steady-decode command runs the same script small"
    ),
    # docs/MODEL.md, a read's chunk profiled on one core
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048": Run(),
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-attention": Run(
        ((r"$", " --repeats 3"),)
    ),
    ".venv/bin/python benchmarks/profile_read_chunk.py --chunk 256 --start 2048 --compare-experts": Run(
        ((r"$", " --repeats 3"),)
    ),
    # docs/MODEL.md, reads alone on servers side by side, the kernels on and off
    '.venv/bin/python benchmarks/bench_paired_reads.py --tokens 4096 --rounds 8 --arm "default=strata-engine serve --ctx 8192" --arm "experts-loop=env STRATA_EXPERT_KERNEL=0 strata-engine serve --ctx 8192" --arm "flash=env STRATA_CHUNK_KERNEL=0 strata-engine serve --ctx 8192"': Run(
        ((r"--tokens 4096 --rounds 8", "--tokens 256 --rounds 1"), (r' --arm "flash=[^"]*"', ""))
    ),
    # docs/MODEL.md, the chunk op's running maxima: two builds side by side (the commit before as a worktree)
    "git worktree add /tmp/strata-before 3cfbddd": Skip(
        "makes a worktree of an earlier commit; the A/B below reads it"
    ),
    '.venv/bin/python benchmarks/bench_paired_reads.py --tokens 2048 --rounds 16 --arm "after=strata-engine serve --layout fastest --batch 6 --ctx 8192" --arm "before=env PYTHONPATH=/tmp/strata-before strata-engine serve --layout fastest --batch 6 --ctx 8192"': Skip(
        "needs the worktree above; " + MINUTES + "; the same script runs small in the check above"
    ),
    # docs/MODEL.md, steady decode with the whole decode
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --streams 4 --tokens 300 --arm "default=env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm "ranks=env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    # docs/MODEL.md, the whole decode against the ranks' hops
    ".venv/bin/python benchmarks/bench_pipeline.py --compile --skip-pause --repeat 1 --batch 8 --stage-workers thread,dist": Skip(
        MINUTES
    ),
    # docs/BATCHING.md, the default layout against the plain one and vLLM
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-default --arm default="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm plain="strata-engine serve --layout plain --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-default-2 --arm default="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm pt80="env STRATA_PIPED_PAUSE_TARGET_MS=80 env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/layout-threads --arm default="env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm ranks="env STRATA_PIPED_READ_MIX=1 STRATA_PIPED_DECODE_MERGE=1 strata-engine serve --batch 6 --ctx 8192 --devices cpu,cpu --batch-groups 2 --compile --prefill-chunk 256 --stage-workers dist" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/template-gemms --arm mkl="env STRATA_COMPILED_GEMMS=aten strata-engine serve --batch 6 --ctx 8192" --arm template="env STRATA_COMPILED_GEMMS=template strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    '.venv/bin/strata-bench run --scenarios two_joiners --scale 0.0625 --repeat 3 --out runs/decode-kernel-2 --arm aten="env STRATA_DECODE_KERNEL=0 strata-engine serve --batch 6 --ctx 8192" --arm native="strata-engine serve --batch 6 --ctx 8192" --arm vllm="env VLLM_CPU_KVCACHE_SPACE=2 $V serve strata_engine/models/strata-tiny-moe --dtype float32 --max-model-len 8192 --max-num-seqs 8 --disable-uvicorn-access-log"': Skip(
        VLLM_CACHE.split(";")[0] + "; " + MINUTES
    ),
    ".venv/bin/python benchmarks/profile_decode_step.py --rows 4,6 --threads 1 --prompt 64 --steps 100 --arms compiled,template": Run(
        ((r"--rows 4,6 --threads 1 --prompt 64 --steps 100", "--rows 2 --threads 1 --prompt 8 --steps 2"),), timeout=300
    ),
    'S="strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile"': Skip(
        "sets a shell variable for the command after it"
    ),
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "groups=$S" --arm "merged=env STRATA_PIPED_DECODE_MERGE=1 $S" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Skip(
        "three fresh engines a round, two of them compiling (~3 min); the MODEL.md steady-decode command runs the same script small"
    ),
    # docs/MODEL.md, steady decode: Strata's eager one-stage arm alone, small (the vLLM arm needs its venv)
    '.venv/bin/python benchmarks/bench_steady_decode.py --rounds 2 --arm "one-stage=strata-engine serve --batch 6 --ctx 8192 --compile" --arm "spec=strata-engine serve --split 2 --batch 6 --batch-groups 2 --ctx 8192 --compile" --arm "vllm=env VLLM_CPU_KVCACHE_SPACE=2 {vllm} serve {model_dir} --dtype float32 --max-model-len 8192 --max-num-seqs 8"': Run(
        (
            (r' --arm "spec=[^"]*" --arm "vllm=[^"]*"', ""),
            (r" --compile", ""),
            (r"--rounds 2", "--rounds 1 --streams 2 --tokens 16"),
        ),
        timeout=300,
    ),
    # docs/measurements/isa-levels.md: the native ops at this CPU's level and at x86-64-v2, the default server against vLLM
    ".venv/bin/python benchmarks/bench_attention.py --sections 3,4 --repeats 9 --chunks 64,256": Run(
        ((r"--repeats 9", "--repeats 1"),)
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
    # docs/SERVER.md
    ".venv/bin/python benchmarks/bench_prompt_cache.py --rounds 3 --out runs/prompt_cache.json": Run(
        ((r"--rounds 3", "--rounds 1 --context 1100"),), timeout=900
    ),
}
