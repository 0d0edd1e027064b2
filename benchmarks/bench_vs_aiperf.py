"""strata-bench's load figures against NVIDIA AIPerf's on the same server, the same workload, alternating.

One Strata engine (the embedded model unless --engine says otherwise) serves both tools. Each round runs
strata-bench's closed loop (load.py, keep-alive on, as AIPerf's HTTP client keeps connections) and
`aiperf profile` at the same concurrency, request count, input and output lengths, in alternating order
(A B, B A, ...). Per tool, the median over rounds of each run's p50 TTFT, TPOT (AIPerf: inter-token
latency), request latency, and output token throughput; agreement within --tolerance (5%), or the line
names the definition that differs and why. AIPerf is optional: absent, the script says so and exits 0.
AIPerf needs a tokenizer: Strata's is byte-level, so a byte-level tokenizer.json is built in a temp dir
(the `tokenizers` package), no hub download.

Run: .venv/bin/python benchmarks/bench_vs_aiperf.py [--concurrency 4] [--requests 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from strata_bench.arms import Arm
from strata_bench.load.field_metrics import run_metrics
from strata_bench.engines.http_stream import run as run_stamped
from strata_bench.engines.launcher import EngineProcess
from strata_bench.engines.memory import stat_fields, tree_pids
from strata_bench.load import LoadShape
from strata_bench.load.runner import LoadConfig, drive_load
from strata_bench.load.workload import LengthSpec, Workload

FIGURES = (
    ("ttft_ms", "TTFT p50 (ms)", "time_to_first_token"),
    ("tpot_ms", "TPOT p50 (ms) = AIPerf ITL", "inter_token_latency"),
    ("latency_ms", "request latency p50 (ms)", "request_latency"),
    ("output_throughput", "output token throughput (tok/s)", "output_token_throughput"),
)
WHY = {
    "ttft_ms": "same definition (send time taken before a connection is taken, to the first token-carrying event); "
    "a gap is one client's own overhead or the server's speed at that time (the rounds alternate so drift "
    "hits both)",
    "tpot_ms": "same definition, (latency - TTFT) / (OSL - 1), checked below on AIPerf's own records; TPOT hangs on the "
    "server's decode speed alone, so a gap means the server ran at another speed under each tool (where "
    "client and engine share CPU cores, AIPerf's controller, workers and record processors take CPU from it)",
    "latency_ms": "AIPerf ends a request at its last SSE message, strata-bench at [DONE], microseconds apart: a gap is "
    "the server's speed or client overhead, as for TPOT",
    "output_throughput": "same definition, output tokens / (last end - first send), checked below; with both loops full "
    "(requests in flight = the concurrency), a gap is the server's speed",
}


def aiperf_command(given: str | None) -> str | None:
    """The aiperf executable: the one given, else this Python's bin directory's, else PATH's; None if absent."""
    if given:
        return shutil.which(given)
    return shutil.which("aiperf", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def byte_tokenizer(directory: Path) -> Path:
    """A byte-level tokenizer (one token per byte, no merges) as tokenizer.json + tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20})
    )
    return directory


def run_strata_bench(url: str, args: argparse.Namespace, round_index: int, workdir: Path) -> dict[str, float | None]:
    shape = LoadShape("closed", concurrency=args.concurrency, requests=args.requests, seed=round_index)
    config = LoadConfig(
        arms=(Arm("strata", url=url),),
        points=(shape,),
        keepalive=True,
        warmup=args.warmup,
        workload=Workload(
            LengthSpec.parse(str(args.input_len)), LengthSpec.parse(str(args.output_len)), seed=1000 + round_index
        ),
    )
    cpu = time.process_time()
    run = run_stamped(drive_load(url, shape, config, f"vs-aiperf-r{round_index}"))
    cpu = time.process_time() - cpu
    (workdir / f"strata-bench-r{round_index}.json").write_text(json.dumps(run))  # raw first, as the bench does
    m = run_metrics(run["requests"])
    out = {key: (m[key] if key == "output_throughput" else (m[key] or {}).get("p50")) for key, _, _ in FIGURES}
    return {**out, "client_cpu_per_s": cpu / m["duration_s"] if m["duration_s"] else None}


def cpu_seconds(pid: int) -> float | None:
    """A process's user + system CPU seconds (/proc/<pid>/stat); None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TreeCPU:
    """CPU seconds of a process and its descendants (`tree_pids`), sampled twice a second with wall-clock stamps,
    so the CPU a client spent inside its measured window can be read off afterwards."""

    def __init__(self, pid: int):
        import threading

        self.root, self.samples, self.done = pid, [], threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        seen: dict[int, float] = {}
        while not self.done.wait(0.5):
            for pid in tree_pids(self.root):
                cpu = cpu_seconds(pid)
                if cpu is not None:  # gone between listing and reading: its last sample stands
                    seen[pid] = cpu
            self.samples.append((time.time(), sum(seen.values())))

    def within(self, start: float, end: float) -> float | None:
        self.done.set()
        self.thread.join()
        inside = [c for t, c in self.samples if start <= t <= end]
        return (inside[-1] - inside[0]) / (end - start) if len(inside) >= 2 and end > start else None


def run_aiperf(
    exe: str, url: str, tokenizer: Path, args: argparse.Namespace, round_index: int, workdir: Path
) -> dict[str, float | None]:
    artifacts = workdir / f"aiperf-r{round_index}"
    cmd = [
        exe,
        "profile",
        "--model",
        args.model,
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--tokenizer",
        str(tokenizer),
        "--concurrency",
        str(args.concurrency),
        "--request-count",
        str(args.requests),
        "--warmup-request-count",
        str(args.warmup),
        "--synthetic-input-tokens-mean",
        str(args.input_len),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(args.output_len),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        "temperature:0",
        "--random-seed",
        str(round_index),
        "--artifact-dir",
        str(artifacts),
        "--ui-type",
        "none",
    ]
    if args.server_token_count:
        cmd.append("--use-server-token-count")
    # Not HF_HUB_OFFLINE: AIPerf then looks the name up in the hub cache, which a local path is not in; an
    # absolute path is loaded from disk as it is, with no hub request.
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    cpu = TreeCPU(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    proc = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    exports = sorted(glob.glob(str(artifacts / "**" / "profile_export_aiperf.json"), recursive=True))
    if proc.returncode != 0 or not exports:
        tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-15:])
        raise RuntimeError(f"aiperf failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    data = json.loads(Path(exports[0]).read_text())
    records = data.get("records", data)
    out: dict[str, float | None] = {}
    for key, _, tag in FIGURES:
        entry = records.get(tag) or {}
        out[key] = entry.get("avg") if key == "output_throughput" else entry.get("p50")
    exported = [
        json.loads(line)["metadata"]
        for line in next(artifacts.glob("**/profile_export.jsonl")).read_text().splitlines()
        if line.strip()
    ]
    measured = [m for m in exported if m.get("benchmark_phase") == "profiling"]
    out["client_cpu_per_s"] = cpu.within(
        min(m["request_start_ns"] for m in measured) / 1e9, max(m["request_end_ns"] for m in measured) / 1e9
    )
    return out


def aiperf_definitions(artifacts: Path) -> list[str]:
    """Our definitions applied to AIPerf's own per-request records, against the figures it reports: where they
    agree, a difference between the tools is measurement, not definition."""
    path = next(iter(sorted(artifacts.glob("**/profile_export.jsonl"))), None)
    summary = next(iter(sorted(artifacts.glob("**/profile_export_aiperf.json"))), None)
    if path is None or summary is None:
        return [f"- no per-request export in {artifacts}: definitions not checked"]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["metadata"].get("benchmark_phase") == "profiling"]
    value = lambda r, k: r["metrics"].get(k, {}).get("value")  # noqa: E731
    tpot_gaps = [
        abs(
            (value(r, "request_latency") - value(r, "time_to_first_token")) / (value(r, "output_sequence_length") - 1)
            - value(r, "inter_token_latency")
        )
        for r in records
        if value(r, "inter_token_latency") is not None
    ]
    ends = [r["metadata"]["request_end_ns"] for r in records]
    starts = [r["metadata"]["request_start_ns"] for r in records]
    ours_s = (max(ends) - min(starts)) / 1e9
    reported = json.loads(summary.read_text())
    theirs_s = (reported.get("benchmark_duration") or {}).get("avg")
    osl = sum(value(r, "output_sequence_length") or 0 for r in records)
    return [
        f"- AIPerf's inter_token_latency is (request_latency - TTFT) / (OSL - 1) on {len(tpot_gaps)} of its "
        f"{len(records)} records (largest difference {max(tpot_gaps, default=0):.2g} ms): our TPOT",
        f"- its benchmark_duration {theirs_s:.3f} s; last request end - first request start over its records "
        f"{ours_s:.3f} s; its output_token_throughput {(reported.get('output_token_throughput') or {}).get('avg'):.4g}, "
        f"total OSL / that span {osl / ours_s:.4g} tok/s",
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", default="strata-engine serve", help="the server's command line (host/port appended)")
    p.add_argument("--model", default=None, help="model name sent by AIPerf (default: what /v1/models says)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one aiperf run may take")
    p.add_argument("--aiperf", help="the aiperf executable (default: this Python's bin directory, then PATH)")
    p.add_argument("--out", type=Path, help="where both tools' raw data goes (default bench-out/vs-aiperf-DATE)")
    p.add_argument("--server-token-count", action="store_true", help="AIPerf counts tokens from the server's usage")
    args = p.parse_args()
    if args.out is not None and args.out.exists():
        p.error(f"--out {args.out} exists: name a new folder, so this run's raw data does not mix with another's")
    exe = aiperf_command(args.aiperf)
    if exe is None:
        print(
            f"AIPerf is not installed ({args.aiperf or 'no aiperf'} found; `pip install aiperf`, an optional "
            "dependency): comparison skipped."
        )
        return 0
    workdir = (args.out or Path("bench-out") / f"vs-aiperf-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    workdir.mkdir(parents=True, exist_ok=False)
    (workdir / "tokenizer").mkdir()
    tokenizer = byte_tokenizer(workdir / "tokenizer")
    engine = EngineProcess(args.engine, name="strata", log_stem=workdir / "engine")
    try:
        engine.start()
        if args.model is None:
            import httpx

            args.model = httpx.get(f"{engine.url}/v1/models").json()["data"][0]["id"]
        rows: dict[str, list[dict[str, float | None]]] = {"strata-bench": [], "aiperf": []}
        for r in range(args.rounds):
            order = ["strata-bench", "aiperf"] if r % 2 == 0 else ["aiperf", "strata-bench"]
            for tool in order:
                got = (
                    run_strata_bench(engine.url, args, r, workdir)
                    if tool == "strata-bench"
                    else run_aiperf(exe, engine.url, tokenizer, args, r, workdir)
                )
                rows[tool].append(got)
                print(
                    f"round {r} {tool}: " + ", ".join(f"{k}={v:.4g}" for k, v in got.items() if v is not None),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        engine.stop()
    checks = aiperf_definitions(workdir / f"aiperf-r{args.rounds - 1}")
    (workdir / "summary.json").write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})
    )
    print(f"raw data in {workdir}", file=sys.stderr)
    code = report(rows, args)
    print("\nDefinitions, checked on AIPerf's own records (its last round):\n" + "\n".join(checks))
    return code


def report(rows: dict[str, list[dict[str, float | None]]], args: argparse.Namespace) -> int:
    print(
        f"\nSame Strata server, concurrency {args.concurrency}, {args.requests} requests of {args.input_len} input "
        f"and {args.output_len} output tokens, {args.rounds} rounds alternating; medians over rounds:\n"
    )
    print("| figure | strata-bench | AIPerf | difference | |\n|---|---:|---:|---:|---|")
    disagreements = []
    for key, label, _ in FIGURES:
        ours = statistics.median([r[key] for r in rows["strata-bench"] if r[key] is not None] or [float("nan")])
        theirs = statistics.median([r[key] for r in rows["aiperf"] if r[key] is not None] or [float("nan")])
        diff = (ours - theirs) / theirs if theirs else float("nan")
        agree = abs(diff) <= args.tolerance
        print(f"| {label} | {ours:.4g} | {theirs:.4g} | {diff:+.1%} | {'agree' if agree else 'DIFFERS'} |")
        if not agree:
            disagreements.append(f"- {label}: {diff:+.1%}. {WHY[key]}")
    print("\n" + ("\n".join(disagreements) if disagreements else f"Every median agrees within {args.tolerance:.0%}."))
    cpu = {
        tool: [r.get("client_cpu_per_s") for r in rows[tool] if r.get("client_cpu_per_s") is not None] for tool in rows
    }
    if all(cpu.values()):
        print(
            "\nClient CPU inside the measured window (CPU seconds per second, median over rounds; the engine shares "
            f"these cores): strata-bench {statistics.median(cpu['strata-bench']):.2f}, "
            f"AIPerf {statistics.median(cpu['aiperf']):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
