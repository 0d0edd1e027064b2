"""The layout of one ragged call: which flat tokens belong to which cache row, known on the host.

Contract: a call's tokens are flattened to `[N]`, rows back to back (a prompt chunk is one row of many
tokens, a decode row one token). `Rows` says, per row, its slot, where its tokens start in the flat
tensor, how many there are and the positions they sit at. Flat tokens past the last row are padding:
they go through the per-token layers (GEMMs, norms) and are never cached, attended to or attended by.
All of it is plain Python, so a forward needs no host round trip to learn its own shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Row:
    slot: int
    start: int  # offset of the row's first token in the flat tensor
    length: int  # tokens of this row in the call
    first: int  # position of the row's first token
    last: int  # position of the row's last token
    consecutive: bool  # positions are first, first + 1, ..., last (a chunk or one decode token)

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class Rows:
    rows: tuple[Row, ...]
    padded: int  # flat tokens in the call, padding included (>= real)

    def __post_init__(self):
        if not self.rows:
            raise ValueError("a call needs at least one row")
        if self.padded < self.real:
            raise ValueError(f"padded {self.padded} < real tokens {self.real}")

    @property
    def real(self) -> int:
        """Tokens that belong to a row; flat indices [0, real)."""
        return self.rows[-1].end

    @property
    def last_tokens(self) -> list[int]:
        """Flat index of each row's last token (whose logits predict the row's next token)."""
        return [row.end - 1 for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def padded_to(self, padded: int) -> "Rows":
        return Rows(self.rows, padded)

    @classmethod
    def of(cls, slots: Sequence[int], positions: Sequence[Sequence[int]], padded: int | None = None) -> "Rows":
        """Row r is slot slots[r] with tokens at positions[r] (a list of ints, any length >= 1)."""
        if len(slots) != len(positions):
            raise ValueError(f"{len(slots)} slots for {len(positions)} rows of positions")
        rows, start = [], 0
        for slot, row_positions in zip(slots, positions):
            if not row_positions:
                raise ValueError(f"slot {slot}: a row needs at least one token")
            first, last = min(row_positions), max(row_positions)
            consecutive = list(row_positions) == list(range(row_positions[0], row_positions[0] + len(row_positions)))
            rows.append(Row(int(slot), start, len(row_positions), int(first), int(last), consecutive))
            start += len(row_positions)
        return cls(tuple(rows), start if padded is None else padded)
