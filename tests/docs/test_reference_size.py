"""docs/ outside docs/measurements/ stays a set of references a user reads in minutes: the size a reader can
hold, and no dated measurement narrative (those are pages of their own, with their command and CPU)."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
REFERENCES = sorted(DOCS.glob("*.md"))
LIMIT_BYTES = 100_000  # all the references together
LIMIT_LINES = 250  # one reference
DATED = re.compile(r"\b20\d\d-\d\d-\d\d \d\d:\d\d")  # "2026-12-02 13:20": a measurement's timestamp


def test_the_references_together_stay_small():
    total = sum(p.stat().st_size for p in REFERENCES)
    sizes = ", ".join(f"{p.name} {p.stat().st_size:,}" for p in REFERENCES)
    assert total <= LIMIT_BYTES, f"docs/*.md hold {total:,} bytes (> {LIMIT_BYTES:,}): {sizes}"


def test_each_reference_is_read_in_minutes():
    long = {p.name: n for p in REFERENCES if (n := len(p.read_text().splitlines())) > LIMIT_LINES}
    assert not long, f"over {LIMIT_LINES} lines (move measurements to docs/measurements/): {long}"


def test_timestamped_measurements_live_in_their_own_pages():
    dated = [
        f"{p.name}:{i}"
        for p in REFERENCES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if DATED.search(line)
    ]
    assert not dated, f"a timestamped measurement in a reference (move it to docs/measurements/): {dated}"
