"""diverge: the first differing index, both sides' facts, and the kind of difference (near-tie only when proven)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strata_verify.diverge import CLEAR, NEAR, UNPROVEN, WRONG, compare_answers, first_difference, logprob_delta


def answer(ids, lps=None, tops=None, texts=None, top_ids=None):
    return SimpleNamespace(
        token_ids=list(ids),
        logprobs=list(lps or []),
        top_logprobs=list(tops or []),
        token_texts=list(texts or []),
        top_ids=list(top_ids or []),
    )


@pytest.mark.parametrize(
    "left,right,expected",
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 9, 3], 1),
        ([5], [6], 0),
        ([1, 2], [1, 2, 3], 2),  # a prefix: differs where the shorter one ends
        ([], [], None),
        ([], [4], 0),
    ],
)
def test_first_difference(left, right, expected):
    assert first_difference(left, right) == expected


def test_swapped_close_pair_chosen_as_each_sides_top1_is_a_near_tie():
    left = answer([7, 8, 9], [-0.1, -0.2, -0.693], [None, None, {" x": -0.693, " y": -0.6935}], [None, None, " x"])
    right = answer([7, 8, 10], [-0.1, -0.2, -0.6931], [None, None, {" y": -0.6931, " x": -0.6932}], [None, None, " y"])
    diff = compare_answers(left_name="interleaved", left=left, right_name="solo", right=right, near_tie=0.01)
    assert (diff.index, diff.left.token, diff.right.token) == (2, 9, 10)
    assert diff.left.logprob == -0.693 and diff.right.logprob == -0.6931
    assert diff.left.margin == pytest.approx(0.0005)
    assert diff.kind == NEAR and diff.near_tie
    text = diff.describe()
    assert "index 2" in text and "interleaved 9" in text and "solo 10" in text and "near-tie" in text


def test_corrupted_token_keeping_the_original_logprob_is_a_wrong_token_not_a_near_tie():
    # What the engine sends when a token id is changed after sampling: the chosen text is the new
    # token's, its logprob the original's, and the server adds it to top_logprobs by text.
    corrupted = answer([5], [-0.40], [{" a": -0.40, " b": -1.50, " c": -0.40}], [" c"])
    clean = answer([4], [-0.39], [{" a": -0.39, " b": -1.49}], [" a"])
    diff = compare_answers(left_name="interleaved", left=corrupted, right_name="solo", right=clean, near_tie=0.01)
    assert diff.kind == WRONG and not diff.near_tie
    assert diff.wrong == ("interleaved",)
    assert "' c' is not its own top-1 ' a'" in diff.describe()
    assert diff.left.margin == pytest.approx(1.10)  # its own candidates' margin, not the added chosen entry's 0
    # a huge threshold cannot turn it into a near-tie either
    assert compare_answers(left_name="L", left=corrupted, right_name="R", right=clean, near_tie=10.0).kind == WRONG


def test_chosen_logprob_below_own_top1_is_a_wrong_token_even_without_texts():
    left = answer([5], [-2.0], [{" a": -0.1, " b": -2.0}])
    right = answer([4], [-0.1], [{" a": -0.1, " b": -2.0}], [" a"])
    diff = compare_answers(left_name="L", left=left, right_name="R", right=right)
    assert diff.kind == WRONG and diff.wrong == ("L",) and "not its argmax" in diff.describe()


def test_logprob_that_disagrees_with_the_chosen_top1_entry_is_a_wrong_token():
    left = answer([5], [-0.05], [{" a": -0.1, " b": -2.0}], [" a"])  # ' a' chosen, with a logprob that is not a's
    diff = compare_answers(
        left_name="L", left=left, right_name="R", right=answer([4], [-0.1], [{" b": -0.1, " a": -0.105}], [" b"])
    )
    assert diff.kind == WRONG and diff.wrong == ("L",) and "disagrees with its own top-1" in diff.describe()


def test_small_margin_on_one_side_only_is_not_a_near_tie():
    left = answer([1], [-0.5], [{"a": -0.5, "b": -0.505}], ["a"])
    right = answer([2], [-0.1], [{"b": -0.1, "a": -1.6}], ["b"])
    diff = compare_answers(left_name="L", left=left, right_name="R", right=right)
    assert diff.kind == CLEAR and "not a near-tie" in diff.describe() and "1.500000" in diff.describe()


def test_close_margins_over_another_pair_are_not_a_near_tie():
    left = answer([1], [-0.5], [{"a": -0.5, "c": -0.501}], ["a"])
    right = answer([2], [-0.5], [{"b": -0.5, "d": -0.501}], ["b"])
    assert compare_answers(left_name="L", left=left, right_name="R", right=right).kind == CLEAR


def test_missing_chosen_text_or_top_logprobs_cannot_prove_a_near_tie():
    left = answer([1], [-0.5], [{"a": -0.5, "b": -0.501}])  # no chosen text: which entry is it?
    right = answer([2], [-0.501], [{"b": -0.501, "a": -0.502}], ["b"])
    diff = compare_answers(left_name="L", left=left, right_name="R", right=right)
    assert diff.kind == UNPROVEN and "did not say" in diff.describe()
    assert compare_answers(left_name="L", left=answer([1]), right_name="R", right=answer([2])).kind == UNPROVEN


def test_reference_side_ranked_by_token_id():
    engine = answer([3], [-0.2], [{" x": -0.2, " y": -0.9}], [" x"])
    reference = answer([4], [-0.3], top_ids=[[[4, -0.3], [3, -0.305]]])
    diff = compare_answers(left_name="engine", left=engine, right_name="reference", right=reference)
    assert diff.right.top1_verdict[0] is True and diff.right.margin == pytest.approx(0.005)
    assert diff.kind == CLEAR  # the engine side is decisive: not a near-tie
    wrong_ref = answer([4], [-0.9], top_ids=[[[3, -0.2], [4, -0.9]]])
    assert compare_answers(left_name="engine", left=engine, right_name="reference", right=wrong_ref).wrong == (
        "reference",
    )


def test_length_only_difference_is_described():
    diff = compare_answers(left_name="L", left=answer([1, 2]), right_name="R", right=answer([1, 2, 3]))
    assert diff.length_only and diff.index == 2
    assert "L has 2 tokens, R 3" in diff.describe()


def test_equal_answers_give_none():
    assert compare_answers(left_name="L", left=answer([1, 2]), right_name="R", right=answer([1, 2])) is None


def test_to_dict_names_the_kind_and_each_sides_verdict():
    left = answer([5], [-2.0], [{" a": -0.1, " b": -2.0}], [" b"])
    data = compare_answers(
        left_name="L", left=left, right_name="R", right=answer([4], [-0.1], [{" a": -0.1, " b": -2.0}], [" a"])
    ).to_dict()
    assert data["kind"] == WRONG and data["left"]["own_top1"] is False and data["right"]["own_top1"] is True


def test_logprob_delta_over_equal_prefix_only():
    left = answer([1, 2, 3], [-0.5, -0.25, -1.0])
    right = answer([1, 2, 4], [-0.5, -0.2500001, -9.0])
    delta = logprob_delta(left, right)
    assert delta.compared == 2 and delta.differing == 1 and delta.index == 1
    assert delta.largest == pytest.approx(1e-7)
    assert not delta.bitwise_equal
    assert logprob_delta(answer([1], [-0.5]), answer([1], [-0.5])).bitwise_equal
    assert logprob_delta(answer([1]), answer([1])).largest is None
