"""diverge: the first differing index, both sides' tokens and logprobs, top-2 margins, near-ties."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from strata_verify.diverge import compare_answers, first_difference, logprob_delta, top2_margin


def answer(ids, lps=None, tops=None):
    return SimpleNamespace(token_ids=list(ids), logprobs=list(lps or []), top_logprobs=list(tops or []))


@pytest.mark.parametrize("left,right,expected", [
    ([1, 2, 3], [1, 2, 3], None),
    ([1, 2, 3], [1, 9, 3], 1),
    ([5], [6], 0),
    ([1, 2], [1, 2, 3], 2),  # a prefix: differs where the shorter one ends
    ([], [], None),
    ([], [4], 0),
])
def test_first_difference(left, right, expected):
    assert first_difference(left, right) == expected


def test_top2_margin_needs_two_candidates():
    assert top2_margin({"a": -0.1, "b": -0.4, "c": -3.0}) == pytest.approx(0.3)
    assert top2_margin({"a": -0.1}) is None
    assert top2_margin(None) is None


def test_divergence_reports_index_tokens_logprobs_and_near_tie():
    left = answer([7, 8, 9], [-0.1, -0.2, -0.693], [None, None, {" x": -0.693, " y": -0.6935}])
    right = answer([7, 8, 10], [-0.1, -0.2, -0.6931], [None, None, {" y": -0.6931, " x": -0.6932}])
    diff = compare_answers(left_name="interleaved", left=left, right_name="solo", right=right, near_tie=0.01)
    assert (diff.index, diff.left_token, diff.right_token) == (2, 9, 10)
    assert diff.left_logprob == -0.693 and diff.right_logprob == -0.6931
    assert diff.left_margin == pytest.approx(0.0005)
    assert diff.near_tie
    text = diff.describe()
    assert "index 2" in text and "interleaved 9" in text and "solo 10" in text and "near-tie" in text


def test_clear_margin_is_not_a_near_tie():
    left = answer([1, 2], [-0.1, -0.1], [None, {"a": -0.1, "b": -2.5}])
    right = answer([1, 3], [-0.1, -0.2], [None, {"c": -0.2, "a": -2.0}])
    diff = compare_answers(left_name="L", left=left, right_name="R", right=right)
    assert not diff.near_tie and "not a near-tie" in diff.describe()


def test_length_only_difference_is_described():
    diff = compare_answers(left_name="L", left=answer([1, 2]), right_name="R", right=answer([1, 2, 3]))
    assert diff.length_only and diff.index == 2
    assert "L has 2 tokens, R 3" in diff.describe()


def test_equal_answers_give_none():
    assert compare_answers(left_name="L", left=answer([1, 2]), right_name="R", right=answer([1, 2])) is None


def test_logprob_delta_over_equal_prefix_only():
    left = answer([1, 2, 3], [-0.5, -0.25, -1.0])
    right = answer([1, 2, 4], [-0.5, -0.2500001, -9.0])
    delta = logprob_delta(left, right)
    assert delta.compared == 2 and delta.differing == 1 and delta.index == 1
    assert delta.largest == pytest.approx(1e-7)
    assert not delta.bitwise_equal
    assert logprob_delta(answer([1], [-0.5]), answer([1], [-0.5])).bitwise_equal
    assert logprob_delta(answer([1]), answer([1])).largest is None
