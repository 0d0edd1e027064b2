"""`python -m strata_engine.runtime.native [--jobs N]`: build every native op for this machine now, side by side
(N at once, default: the cores), so a first `strata-engine serve` finds them built (scripts/install.sh runs it;
a failed build is said, not fatal). `--jobs 1` builds them one after another, as a start once did."""

from __future__ import annotations

import argparse
import sys
import time

from .choice import OPS
from .prebuild import build_missing, missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m strata_engine.runtime.native", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="builds at once (default: this machine's cores)")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    ops = [op[:4] for op in OPS.values()]
    began = time.monotonic()
    todo = missing(ops)
    if not todo:
        print("strata-engine: the native ops are built for this machine", file=sys.stderr)
        return 0
    build_missing(ops, args.jobs)
    left = [name for _, name, _, _ in missing(ops)]
    print(
        f"strata-engine: native ops built in {time.monotonic() - began:.0f} s"
        + (f"; not built (ATen's path serves them): {', '.join(left)}" if left else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
