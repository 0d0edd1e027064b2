"""Statistics for the report: median and spread, and paired comparisons of an arm with the baseline.

A pair is one round's run of each arm on the same scenario (the same prompts). Per metric: in how many
pairs the arm's value was lower, a two-sided sign test (scipy binomtest, ties dropped), a Wilcoxon
signed-rank p-value, and a seeded percentile bootstrap interval of the median of the paired ratios.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    min: float
    max: float


def summarize(values: Sequence[float | None]) -> Summary | None:
    """Median and min-max of the values that exist; None when none do."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return None
    return Summary(n=len(present), median=float(np.median(present)), min=min(present), max=max(present))


@dataclass(frozen=True)
class PairedComparison:
    n_pairs: int
    lower: int  # pairs where the arm's value was below the baseline's
    higher: int
    ties: int
    sign_p: float | None
    wilcoxon_p: float | None
    ratio_median: float | None  # median of arm / baseline over pairs with a nonzero baseline
    ratio_ci: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sign_test_p(lower: int, higher: int) -> float | None:
    """Two-sided sign test: ties excluded; None with no untied pair."""
    n = lower + higher
    if n == 0:
        return None
    from scipy import stats as sps  # scipy.stats takes ~1 s to import: only when a report needs it

    return float(sps.binomtest(lower, n, 0.5, alternative="two-sided").pvalue)


def wilcoxon_p(differences: Sequence[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p of paired differences; None when every difference is zero."""
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return None
    from scipy import stats as sps

    return float(sps.wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided").pvalue)


def bootstrap_median_ci(
    values: Sequence[float], *, seed: int = 0, resamples: int = 10_000, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the median; deterministic for a seed."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    data = np.asarray([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        return None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    medians = np.median(data[picks], axis=1)
    alpha = (1 - confidence) / 2
    return float(np.quantile(medians, alpha)), float(np.quantile(medians, 1 - alpha))


def compare_paired(
    arm: Sequence[float | None], baseline: Sequence[float | None], *, seed: int = 0, resamples: int = 10_000
) -> PairedComparison:
    """Compare round-aligned values; a round where either side is missing is not a pair."""
    if len(arm) != len(baseline):
        raise ValueError(f"paired values differ in length: arm {len(arm)}, baseline {len(baseline)}")
    pairs = [(float(a), float(b)) for a, b in zip(arm, baseline) if a is not None and b is not None]
    lower = sum(1 for a, b in pairs if a < b)
    higher = sum(1 for a, b in pairs if a > b)
    ratios = [a / b for a, b in pairs if b != 0]
    return PairedComparison(
        n_pairs=len(pairs),
        lower=lower,
        higher=higher,
        ties=len(pairs) - lower - higher,
        sign_p=sign_test_p(lower, higher),
        wilcoxon_p=wilcoxon_p([a - b for a, b in pairs]),
        ratio_median=float(np.median(ratios)) if ratios else None,
        ratio_ci=bootstrap_median_ci(ratios, seed=seed, resamples=resamples),
    )
