"""Benchmark (not a test) of the real torch pipeline on the embedded model, two stages on this machine.

Prints, in one process, side by side:
  1. aggregate decode tokens/s with 1 batch group and with 2 groups on 2 stages (target: 2 groups >= 1.3x);
  2. the longest pause of a decoding stream while a long prompt is read, pieces unset vs set
     (target: pieces cut it >= 3x), plus the long prompt's TTFT in both.
Usage: .venv/bin/python benchmarks/bench_pipeline.py [--long 6000] [--chunk 256] [--piece 512] [--repeat 3]
       [--stage-workers thread,process] [--skip-pause]
With several --stage-workers values the arms (workers x groups) alternate within each repeat.
"""
from __future__ import annotations

import argparse
import statistics
import time

from strata_engine import Engine, SamplingParams


def decode_rate(groups: int, batch: int, tokens: int, chunk: int, workers: str = "auto") -> float:
    prompts = [f"def function_{i}(value):\n    " for i in range(batch)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    with Engine.from_pretrained(batch=batch, batch_groups=groups, split=2, prefill_chunk=chunk, log_events=False,
                                stage_workers=workers) as engine:
        engine.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True))  # warm up
        done: list[float] = []
        handles = [engine.submit(p, params, on_output=lambda item: done.append(getattr(item, "t", None))) for p in prompts]
        for h in handles:
            h.result()
    times = sorted(t for t in done if t is not None)
    # rate over the steady state: from the last stream's first token to the end
    return (len(times) - batch) / (times[-1] - times[batch - 1])


def longest_pause(piece: int | None, long_tokens: int, chunk: int, workers: str = "auto") -> tuple[float, float]:
    env = {"STRATA_PIPED_READ_PIECE": str(piece)} if piece else {}
    streams = 2
    with Engine.from_pretrained(batch=4, batch_groups=2, split=2, prefill_chunk=chunk, ctx=max(4096, long_tokens + 256),
                                log_events=False, env=env, stage_workers=workers) as engine:
        times: dict[int, list[float]] = {i: [] for i in range(streams)}
        params = SamplingParams(max_tokens=100_000, ignore_eos=True)
        handles = [engine.submit(f"class Stream{i}:\n", params,
                                 on_output=lambda item, i=i: times[i].append(item.t) if hasattr(item, "t") else None)
                   for i in range(streams)]
        while min(len(v) for v in times.values()) < 20:
            time.sleep(0.01)
        text = "".join(f"    result_{i} = compute(result_{i - 1}, {i})\n" for i in range(1, long_tokens))
        sent = engine.clock()
        joiner = engine.submit(engine.tokenizer.encode(text)[:long_tokens], SamplingParams(max_tokens=1, ignore_eos=True))
        joiner.result()
        ttft = engine.clock() - sent
        time.sleep(0.3)
        for h in handles:
            h.cancel()
    pauses = []
    for ts in times.values():
        window = [t for t in ts if t >= sent - 0.5]
        pauses.append(max(b - a for a, b in zip(window, window[1:])))
    return max(pauses), ttft


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=int, default=6000, help="tokens of the joining prompt")
    ap.add_argument("--chunk", type=int, default=256, help="--prefill-chunk")
    ap.add_argument("--piece", type=int, default=512, help="STRATA_PIPED_READ_PIECE for the 'set' arm")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96, help="decode tokens per stream for the rate")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stage-workers", default="auto",
                    help="comma-separated: auto, thread, process (each is measured; arms alternate)")
    ap.add_argument("--skip-pause", action="store_true", help="measure the decode rates only")
    args = ap.parse_args()

    workers = [w for w in args.stage_workers.split(",") if w]
    rates = {(w, g): [] for w in workers for g in (1, 2)}
    for _ in range(args.repeat):  # alternate the arms so drift hits all of them
        for w, groups in rates:
            rates[(w, groups)].append(decode_rate(groups, args.batch, args.tokens, args.chunk, w))
    for w in workers:
        r1, r2 = statistics.median(rates[(w, 1)]), statistics.median(rates[(w, 2)])
        print(f"decode, batch {args.batch}, 2 stages, stage workers {w}: 1 group {r1:.1f} tok/s, 2 groups {r2:.1f} tok/s, "
              f"ratio {r2 / r1:.2f}x (target >= 1.3x)")
        print(f"  raw tok/s: 1 group {[round(r, 1) for r in rates[(w, 1)]]}, 2 groups {[round(r, 1) for r in rates[(w, 2)]]}")
    if args.skip_pause:
        return

    for w in workers:
        unset, pieces = [], []
        for _ in range(args.repeat):
            unset.append(longest_pause(None, args.long, args.chunk, w))
            pieces.append(longest_pause(args.piece, args.long, args.chunk, w))
        pu, tu = statistics.median(p for p, _ in unset), statistics.median(t for _, t in unset)
        pp, tp = statistics.median(p for p, _ in pieces), statistics.median(t for _, t in pieces)
        print(f"stage workers {w}: longest pause while a {args.long}-token prompt is read: unset {pu * 1000:.0f} ms, "
              f"pieces of {args.piece} {pp * 1000:.0f} ms, cut {pu / pp:.1f}x (target >= 3x)")
        print(f"  the long prompt's TTFT: unset {tu * 1000:.0f} ms, pieces {tp * 1000:.0f} ms ({tp / tu:.2f}x)")


if __name__ == "__main__":
    main()
