"""The statistics on known inputs with known outputs."""

import pytest

from strata_bench.stats import bootstrap_median_ci, compare_paired, sign_test_p, summarize, wilcoxon_p


def test_summary():
    s = summarize([3.0, None, 1.0, 2.0, 10.0])
    assert (s.n, s.median, s.min, s.max) == (4, 2.5, 1.0, 10.0)
    assert summarize([None, None]) is None


def test_sign_test_known_values():
    assert sign_test_p(5, 0) == pytest.approx(0.0625)  # 2 * 0.5**5
    assert sign_test_p(4, 1) == pytest.approx(0.375)  # 2 * (1 + 5) / 32
    assert sign_test_p(0, 0) is None


def test_wilcoxon_known_values():
    assert wilcoxon_p([-1, -2, -3, -4, -5]) == pytest.approx(0.0625)  # exact: 2 / 2**5
    assert wilcoxon_p([0, 0]) is None


def test_bootstrap_interval_is_seeded_and_exact_for_constant_data():
    assert bootstrap_median_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    a = bootstrap_median_ci([1.0, 2.0, 3.0, 4.0, 10.0], seed=7)
    assert a == bootstrap_median_ci([1.0, 2.0, 3.0, 4.0, 10.0], seed=7)
    assert 1.0 <= a[0] <= 3.0 <= a[1] <= 10.0
    assert bootstrap_median_ci([]) is None


def test_paired_comparison():
    base = [12.2, 12.16, 12.23, 12.2, 12.18]
    arm = [4.2, 4.19, 9.5, 4.21, 4.22]
    c = compare_paired(arm, base)
    assert (c.n_pairs, c.lower, c.higher, c.ties) == (5, 5, 0, 0)
    assert c.sign_p == pytest.approx(0.0625)
    assert c.ratio_median == pytest.approx(4.21 / 12.2)
    lo, hi = c.ratio_ci
    assert lo <= c.ratio_median <= hi


def test_missing_rounds_are_not_pairs_and_ties_are_counted():
    c = compare_paired([1.0, None, 2.0, 3.0], [1.0, 5.0, None, 4.0])
    assert (c.n_pairs, c.lower, c.higher, c.ties) == (2, 1, 0, 1)
    assert c.sign_p == pytest.approx(1.0)
    with pytest.raises(ValueError):
        compare_paired([1.0], [1.0, 2.0])


def test_zero_baseline_gives_no_ratio():
    c = compare_paired([1.0, 2.0], [0.0, 0.0])
    assert c.ratio_median is None and c.ratio_ci is None and c.higher == 2
