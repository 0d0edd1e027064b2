"""`python -m strata_engine.runtime.native`: build every native op for this machine now, side by side, so a
first `strata-engine serve` finds them built (scripts/install.sh runs it; a failed build is said, not fatal)."""

from __future__ import annotations

import sys
import time

from .choice import OPS
from .prebuild import build_missing, missing


def main() -> int:
    ops = [op[:4] for op in OPS.values()]
    began = time.monotonic()
    todo = missing(ops)
    if not todo:
        print("strata-engine: the native ops are built for this machine", file=sys.stderr)
        return 0
    build_missing(ops)
    left = [name for _, name, _, _ in missing(ops)]
    print(
        f"strata-engine: native ops built in {time.monotonic() - began:.0f} s"
        + (f"; not built (ATen's path serves them): {', '.join(left)}" if left else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
