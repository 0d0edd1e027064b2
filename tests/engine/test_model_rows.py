"""Rows, the host-side layout of a ragged call, and Part.ragged that builds one: spans, positions, padding."""

from __future__ import annotations

import pytest
import torch

from strata_engine.model.rows import Rows
from strata_engine.runtime.invariance import padded_rows
from strata_engine.runtime.pipeline import Part


def test_rows_lay_tokens_back_to_back():
    rows = Rows.of([3, 0, 1], [[10, 11, 12], [7], [2, 0]])
    assert [(r.slot, r.start, r.length, r.first, r.last, r.consecutive) for r in rows.rows] == [
        (3, 0, 3, 10, 12, True),
        (0, 3, 1, 7, 7, True),
        (1, 4, 2, 0, 2, False),
    ]
    assert rows.real == rows.padded == 6 and rows.last_tokens == [2, 3, 5]
    assert rows.padded_to(32).padded == 32 and rows.padded_to(32).last_tokens == [2, 3, 5]


def test_rows_refuse_what_cannot_be_laid_out():
    with pytest.raises(ValueError, match="2 slots for 1 rows"):
        Rows.of([0, 1], [[0]])
    with pytest.raises(ValueError, match="slot 4: a row needs at least one token"):
        Rows.of([4], [[]])
    with pytest.raises(ValueError, match="padded 2 < real tokens 3"):
        Rows.of([0], [[0, 1, 2]], padded=2)


def test_part_ragged_mixes_a_chunk_and_decode_rows():
    part = Part.ragged([(2, 16, [5, 6, 7, 8]), (0, 40, [9]), (1, 3, [4])], want_logits=True)
    assert part.tokens.tolist() == [5, 6, 7, 8, 9, 4] and part.positions.tolist() == [16, 17, 18, 19, 40, 3]
    assert [r.slot for r in part.rows.rows] == [2, 0, 1] and part.rows.last_tokens == [3, 4, 5]
    uniform = Part.uniform(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[0, 1], [5, 6]]), torch.tensor([1, 0]), False)
    assert uniform.tokens.tolist() == [1, 2, 3, 4] and [(r.slot, r.first) for r in uniform.rows.rows] == [
        (1, 0),
        (0, 5),
    ]


@pytest.mark.parametrize("rows, tile, expected", [(1, 32, 32), (32, 32, 32), (33, 32, 64), (515, 32, 544), (5, 1, 5)])
def test_padded_rows(rows, tile, expected):
    assert padded_rows(rows, tile) == expected
