"""The one token-equality check of the engine tests: names the first differing index and both sides."""

from __future__ import annotations

from typing import Sequence


def assert_tokens_equal(
    *,
    expected: Sequence[int],
    actual: Sequence[int],
    label: str,
    expected_name: str = "expected",
    actual_name: str = "actual",
) -> None:
    """Fail with the first differing index and a window of both sides (or the length difference)."""
    expected, actual = list(expected), list(actual)
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            lo = max(0, i - 3)
            raise AssertionError(
                f"{label}: first difference at token {i}: {expected_name}={a} {actual_name}={b}\n"
                f"  {expected_name}[{lo}:{i + 4}] = {expected[lo : i + 4]}\n  {actual_name}[{lo}:{i + 4}] = {actual[lo : i + 4]}"
            )
    if len(expected) != len(actual):
        raise AssertionError(
            f"{label}: equal for {min(len(expected), len(actual))} tokens, then lengths differ: "
            f"{expected_name} has {len(expected)}, {actual_name} has {len(actual)}"
        )
