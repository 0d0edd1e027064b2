"""The HTTP fake engine's command line (fakes.http_engine): the engine's shape, its timing, and the faults.

Contract: `parse(argv)` gives the namespace every part of the fake reads (`args.piece`, `args.cache_fault`, ...);
each flag's help says what it changes, fakes.http_engine's docstring says it as a whole.
"""

from __future__ import annotations

import argparse


def parse(argv: list[str] | None, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--piece", type=int, default=512, help="tokens per read piece; 0 = one run")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--read-ms-per-token", type=float, default=0.2)
    parser.add_argument("--decode-ms", type=float, default=5.0)
    parser.add_argument("--decode-budget-ms", type=float, default=40.0)
    parser.add_argument("--salt", default="", help="a different 'build': other (still deterministic) answers")
    parser.add_argument("--salt-from", type=int, default=0, help="the salt changes tokens from this index on")
    parser.add_argument("--no-yield", action="store_true")
    parser.add_argument("--no-events", action="store_true")
    parser.add_argument("--batch-invariant", action="store_true")
    parser.add_argument("--logprob-jitter", type=float, default=0.0)
    parser.add_argument("--die-after", type=int, default=0, help="exit after N completions (0 = never)")
    parser.add_argument("--fail-start", action="store_true", help="write an error to stderr and exit 3")
    parser.add_argument(
        "--prompt-cache",
        type=float,
        default=None,
        help="MiB of prefix cache (0 = off); unset: an engine without one (no cached_tokens in usage)",
    )
    parser.add_argument("--cache-tokens-per-mib", type=int, default=512)
    parser.add_argument(
        "--cache-fault",
        default="",
        help="one-too-far: a hit claims one token more than it matched; "
        "salt-leak: cache_salt is ignored (prefixes cross salts); store-restore: a hit from the store "
        "answers without its last cached position; logprob-shift: a hit's logprobs move 0.019, "
        "its tokens do not",
    )
    parser.add_argument(
        "--sample-fault",
        default="",
        choices=("", "batch", "advance", "greedy"),
        help="batch: a seeded draw depends on the requests running beside it; advance: one generator "
        "for the engine, so the same seed draws differently on every request; greedy: temperature "
        "is ignored",
    )
    parser.add_argument(
        "--batch-fault",
        type=int,
        default=0,
        help="greedy tokens from index 2 on change while N or more "
        "requests are in flight (a bucket-boundary bug; 0 = none)",
    )
    parser.add_argument(
        "--stream-fault",
        default="",
        choices=("", "last-token"),
        help="last-token: a response not streamed renders its last token from the wrong position",
    )
    parser.add_argument("--no-metrics", action="store_true", help="no GET /metrics (no engine counters)")
    parser.add_argument("--serial", action="store_true", help="one request at a time; the others wait in the queue")
    parser.add_argument(
        "--burst-sampled",
        type=int,
        default=0,
        help="deliver the first N sampled requests' tokens in one burst (the client sees no stream beside them)",
    )
    parser.add_argument(
        "--stall-second-ms",
        type=float,
        default=0.0,
        help="hold the first token of a request started while another streams (a starved front end)",
    )
    return parser.parse_args(argv)
