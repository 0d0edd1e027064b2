"""Where two answers part: one first-difference rule for bench and verify alike.

`first_difference(a, b)` is the index of the first differing element; when one is a strict prefix of the
other it is the shorter length (a missing token is a difference); None only when both are equal. A
caller that compares over the tokens both sides received (a stream the bench closed early) cuts both
to the common length first: `first_difference(a[:n], b[:n])`.
"""

from __future__ import annotations

from typing import Any, Sequence


def first_difference(left: Sequence[Any], right: Sequence[Any]) -> int | None:
    for index, (a, b) in enumerate(zip(left, right)):
        if a != b:
            return index
    return None if len(left) == len(right) else min(len(left), len(right))


def common_prefix_difference(left: Sequence[Any], right: Sequence[Any]) -> int | None:
    """The first difference over the elements both sides have."""
    length = min(len(left), len(right))
    return first_difference(left[:length], right[:length])
