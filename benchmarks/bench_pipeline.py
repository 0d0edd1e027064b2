"""Benchmark (not a test) of the real torch pipeline on the embedded model, two stages on this machine.

Prints, from one run, side by side for each --stage-workers value:
  1. aggregate decode tokens/s of 1 batch group of --batch streams against 2 groups on 2 stages, two ways:
     "same streams" (2 groups of --batch/2: the micro-batches halve) and "same micro-batch" (2 groups of
     --batch each: the pipeline fills the second stage with a second group, as the spec's engine does).
     Targets: 2 groups >= 1.3x the rate of 1 group on threads, >= 1.6x on dist stage ranks, read on the
     same-micro-batch pair: a decode micro-batch's time barely depends on its rows here (every GEMM runs
     on rows padded to the 16-row tile, and each step is dispatch-bound), so halving the micro-batches
     halves no work and "same streams" stays near 1x however well the stages overlap;
  2. the transport cost of one micro-batch (a decode micro-batch alone in the pipeline: its round trip
     minus the stages' own compute), in µs, and the bytes it puts on each link;
  3. the longest pause of a decoding stream while a long prompt is read, pieces unset vs set
     (target: pieces cut it >= 3x), plus the long prompt's TTFT in both.
Usage: .venv/bin/python benchmarks/bench_pipeline.py [--long 6000] [--chunk 256] [--piece 512] [--repeat 3]
       [--stage-workers thread,dist] [--compile] [--skip-pause] [--json out.json]
With --compile every engine runs the compiled decode step; on thread stages a decode micro-batch alone in
the pipeline then takes the whole decode (every layer in one call, one stage time), so item 2 compares the
ranks' hops with none.
With several --stage-workers values the arms (workers x groups) alternate within each repeat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


from strata_engine import Engine, SamplingParams
from strata_engine.runtime.pipeline import MicroBatch, Part


def decode_rate(
    groups: int, batch: int, tokens: int, chunk: int, workers: str = "auto", compile: bool = False
) -> float:
    prompts = [f"def function_{i}(value):\n    " for i in range(batch)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    with Engine.from_pretrained(
        batch=batch,
        batch_groups=groups,
        split=2,
        prefill_chunk=chunk,
        log_events=False,
        stage_workers=workers,
        compile=compile,
    ) as engine:
        engine.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True))  # warm up
        done: list[float] = []
        handles = [
            engine.submit(p, params, on_output=lambda item: done.append(getattr(item, "t", None))) for p in prompts
        ]
        for h in handles:
            h.result()
    times = sorted(t for t in done if t is not None)
    # rate over the steady state: from the last stream's first token to the end
    return (len(times) - batch) / (times[-1] - times[batch - 1])


def transport_us(workers: str, rows: int, samples: int = 200, compile: bool = False) -> tuple[float, float, list[int]]:
    """One decode micro-batch of `rows` rows alone in the pipeline, `samples` times: the median round trip
    and the median of (round trip - the stages' compute), both in µs; and the bytes on each link."""
    engine = Engine.from_pretrained(
        batch=max(rows, 2), split=2, log_events=False, stage_workers=workers, compile=compile
    )
    pipeline = engine.executor.pipeline
    trips, transport = [], []
    try:
        for i in range(samples + 10):
            part = Part.ragged([(slot, 1 + i % 50, [7]) for slot in range(rows)], want_logits=True)
            t0 = time.perf_counter()
            pipeline.submit(MicroBatch([part]))
            mb = pipeline.get()
            trip = (time.perf_counter() - t0) * 1e6
            if mb.error is not None:
                raise RuntimeError(f"the {workers} pipeline failed a decode micro-batch: {mb.error}")
            if i >= 10 and mb.stage_ms:  # the first few warm up
                trips.append(trip)
                transport.append(trip - sum(mb.stage_ms) * 1000.0)
        link_bytes = getattr(pipeline, "link_bytes", lambda _rows: [])(rows)
    finally:
        engine.shutdown()
    if not trips:  # thread stages report no per-stage times
        return float("nan"), float("nan"), []
    return statistics.median(trips), statistics.median(transport), link_bytes


def longest_pause(piece: int | None, long_tokens: int, chunk: int, workers: str = "auto") -> tuple[float, float]:
    env = {"STRATA_PIPED_READ_PIECE": str(piece)} if piece else {}
    streams = 2
    with Engine.from_pretrained(
        batch=4,
        batch_groups=2,
        split=2,
        prefill_chunk=chunk,
        ctx=max(4096, long_tokens + 256),
        log_events=False,
        env=env,
        stage_workers=workers,
    ) as engine:
        times: dict[int, list[float]] = {i: [] for i in range(streams)}
        params = SamplingParams(max_tokens=100_000, ignore_eos=True)
        handles = [
            engine.submit(
                f"class Stream{i}:\n",
                params,
                on_output=lambda item, i=i: times[i].append(item.t) if hasattr(item, "t") else None,
            )
            for i in range(streams)
        ]
        while min(len(v) for v in times.values()) < 20:
            time.sleep(0.01)
        text = "".join(f"    result_{i} = compute(result_{i - 1}, {i})\n" for i in range(1, long_tokens))
        sent = engine.clock()
        joiner = engine.submit(
            engine.tokenizer.encode(text)[:long_tokens], SamplingParams(max_tokens=1, ignore_eos=True)
        )
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
    ap.add_argument(
        "--stage-workers",
        default="thread,dist",
        help="comma-separated: auto, thread, dist (each is measured; arms alternate)",
    )
    ap.add_argument("--compile", action="store_true", help="the compiled decode step in every engine")
    ap.add_argument("--skip-pause", action="store_true", help="measure the decode rates and the transport only")
    ap.add_argument("--json", default=None, help="also write every raw measurement to this file")
    args = ap.parse_args()

    workers = [w for w in args.stage_workers.split(",") if w]
    raw: dict = {"args": vars(args), "rates": {}, "transport": {}, "pauses": {}}
    # arm -> (groups, total streams): 1 group; 2 groups sharing the same streams; 2 groups of a full micro-batch each
    shapes = {"1": (1, args.batch), "2_same_streams": (2, args.batch), "2_same_microbatch": (2, 2 * args.batch)}
    rates = {(w, arm): [] for w in workers for arm in shapes}
    for _ in range(args.repeat):  # alternate the arms so drift hits all of them
        for w, arm in rates:
            groups, batch = shapes[arm]
            rates[(w, arm)].append(decode_rate(groups, batch, args.tokens, args.chunk, w, args.compile))
    for w in workers:
        med = {arm: statistics.median(rates[(w, arm)]) for arm in shapes}
        target = 1.6 if w == "dist" else 1.3
        print(
            f"decode, 2 stages, stage workers {w}: 1 group of {args.batch} streams {med['1']:.1f} tok/s; "
            f"2 groups of {args.batch // 2} (same streams) {med['2_same_streams']:.1f} tok/s, "
            f"{med['2_same_streams'] / med['1']:.2f}x; 2 groups of {args.batch} (same micro-batch) "
            f"{med['2_same_microbatch']:.1f} tok/s, {med['2_same_microbatch'] / med['1']:.2f}x (target >= {target}x)"
        )
        print("  raw tok/s: " + "; ".join(f"{arm} {[round(r, 1) for r in rates[(w, arm)]]}" for arm in shapes))
        raw["rates"][w] = {arm: rates[(w, arm)] for arm in shapes}

    rows = max(1, args.batch // 2)
    for w in workers:
        trip, transport, link_bytes = transport_us(w, rows, compile=args.compile)
        raw["transport"][w] = {"rows": rows, "round_trip_us": trip, "transport_us": transport, "link_bytes": link_bytes}
        links = f", bytes per link {link_bytes}" if link_bytes else ""
        print(
            f"transport, stage workers {w}: a {rows}-row decode micro-batch alone: round trip {trip:.0f} µs, "
            f"of which transport {transport:.0f} µs (all hops){links}"
        )
    if not args.skip_pause:
        for _ in range(args.repeat):  # arms alternate here too
            for w in workers:
                arm = raw["pauses"].setdefault(w, {"unset": [], "pieces": []})
                arm["unset"].append(longest_pause(None, args.long, args.chunk, w))
                arm["pieces"].append(longest_pause(args.piece, args.long, args.chunk, w))
        for w in workers:
            unset, pieces = raw["pauses"][w]["unset"], raw["pauses"][w]["pieces"]
            pu, tu = statistics.median(p for p, _ in unset), statistics.median(t for _, t in unset)
            pp, tp = statistics.median(p for p, _ in pieces), statistics.median(t for _, t in pieces)
            print(
                f"stage workers {w}: longest pause while a {args.long}-token prompt is read: unset {pu * 1000:.0f} ms, "
                f"pieces of {args.piece} {pp * 1000:.0f} ms, cut {pu / pp:.1f}x (target >= 3x)"
            )
            print(f"  the long prompt's TTFT: unset {tu * 1000:.0f} ms, pieces {tp * 1000:.0f} ms ({tp / tu:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
