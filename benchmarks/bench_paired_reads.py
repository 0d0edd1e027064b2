"""A prompt read alone, engine against engine: every arm's server up at once, reads alternating between them.

Each read is one greedy request for 1 token on a fresh --tokens-token prompt (bytes of the standard library's
own source behind a line that differs per read, so no read hits a prompt cache), timed from the send to the
answer: the whole read and one token. The arms' servers stay up side by side for the whole run and take turns
read by read (the order reversed every round), so a machine that slows down slows every arm alike; that is
what lets two builds of the engine, or the engine with a kernel on and off, be compared on a noisy machine.
Prints every read, each arm's median and best, and each arm's median as a ratio to the first arm's, with
the CPU. The commands are `strata-bench run --arm` commands (the engines preset's placeholders `{vllm}`,
`{model_dir}`, `{llama_server}`, `{gguf}` are filled the same way). Example, the chunk attention kernel on
and off (docs/measurements/chunk-kernel.md):

    .venv/bin/python benchmarks/bench_paired_reads.py --tokens 4096 --rounds 8 \\
        --arm "native=strata-engine serve --ctx 8192" \\
        --arm "flash=env STRATA_CHUNK_KERNEL=0 strata-engine serve --ctx 8192"
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata_bench.engines.launcher import EngineProcess  # noqa: E402
from strata_bench.engines.probe import probe  # noqa: E402
from strata_bench.arms import ArmError  # noqa: E402
from strata_bench.presets import engine_commands  # noqa: E402
from strata_bench.provenance import cpu_line  # noqa: E402


def prompt_text(tokens: int, read: int) -> str:
    """About `tokens` tokens of the byte-level model's kind of text, different from every other read's."""
    text = Path(argparse.__file__).read_text() + Path(statistics.__file__).read_text()
    while len(text) < tokens:
        text += text
    head = f"# read {read} {time.time_ns()}\n"
    return head + text[: max(0, tokens - len(head))]


def read_once(client: httpx.Client, url: str, model: str, tokens: int, read: int) -> float:
    body = {"model": model, "prompt": prompt_text(tokens, read), "max_tokens": 1, "temperature": 0}
    start = time.perf_counter()
    answer = client.post(f"{url}/v1/completions", json=body, timeout=600.0)
    took = time.perf_counter() - start
    answer.raise_for_status()
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--arm", action="append", required=True, help="NAME=COMMAND (an engine serving the embedded model); two or more"
    )
    p.add_argument("--tokens", type=int, default=4096, help="prompt length of every read (default 4096)")
    p.add_argument("--rounds", type=int, default=8, help="reads per arm, alternating (default 8)")
    p.add_argument("--warmup", type=int, default=1, help="untimed reads per arm first (default 1)")
    args = p.parse_args()
    try:
        arms = engine_commands(args.arm)
    except ArmError as exc:
        raise SystemExit(str(exc)) from None
    if len(arms) < 2:
        raise SystemExit("give two or more --arm NAME=COMMAND: the reads compare them")
    print(
        f"CPU {cpu_line()}, {args.tokens}-token reads, {args.rounds} rounds",
        flush=True,
    )
    times: dict[str, list[float]] = {name: [] for name, _ in arms}
    read = 0
    with ExitStack() as stack, httpx.Client() as client:
        urls = {}
        for name, command in arms:
            engine = stack.enter_context(EngineProcess(command, name=name))
            urls[name] = (engine.url, probe(engine.url).model or "strata-tiny-moe")
        for name, (url, model) in urls.items():
            for _ in range(args.warmup):
                read_once(client, url, model, args.tokens, read := read + 1)
        for round_ in range(args.rounds):
            for name, _ in arms if round_ % 2 == 0 else arms[::-1]:
                url, model = urls[name]
                took = read_once(client, url, model, args.tokens, read := read + 1)
                times[name].append(took)
                print(f"round {round_}: {name}: {took:.3f} s", flush=True)
    first = statistics.median(times[arms[0][0]])
    print(
        f"\n| arm | {args.tokens}-token read, median of {args.rounds} (best) | ratio to {arms[0][0]} |\n|---|---:|---:|"
    )
    for name, _ in arms:
        median = statistics.median(times[name])
        print(f"| {name} | {median:.3f} s ({min(times[name]):.3f}) | {median / first:.2f}x |")


if __name__ == "__main__":
    main()
