"""Inference over seeds: t quantiles and p-values against closed forms, Holm's adjustment by hand, the detectable
effect, and Fieller's interval against a brute-force grid of t-tests."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from credo.study.stats import (
    Estimate,
    detectable,
    holm,
    mean_interval,
    paired_p,
    recovered,
    share_of_gain,
    t_quantile,
    written_quantile,
)

OLD_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
             11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
             20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
"""The hand-kept table of t_{0.975, df} the reports used before scipy (printed tables give the same digits)."""


def test_t_quantiles_match_the_printed_table():
    assert {df: written_quantile(df) for df in OLD_TABLE} == OLD_TABLE
    # df 1 is Cauchy: t_{0.975} = tan(0.475 pi); df 2: t_p = (2p - 1) sqrt(2 / (1 - (2p - 1)^2))
    assert t_quantile(1) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-12)
    assert t_quantile(2) == pytest.approx(0.95 * math.sqrt(2 / (1 - 0.95**2)), rel=1e-12)
    assert t_quantile(100_000) == pytest.approx(1.959964, abs=1e-4)  # the normal's
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)


def test_the_interval():
    values = [0.41, 0.47, 0.52, 0.44]
    estimate = mean_interval(values)
    half = t_quantile(3) * statistics.stdev(values) / math.sqrt(4)
    assert estimate.mean == pytest.approx(statistics.mean(values))
    assert (estimate.low, estimate.high) == pytest.approx((estimate.mean - half, estimate.mean + half))
    single = mean_interval([0.3])
    assert (single.mean, single.low, single.high, str(single)) == (0.3, None, None, "0.300")


def test_p_values_against_closed_forms():
    # df 1 (Cauchy): P(|T| > t) = 1 - 2 atan(t) / pi. Differences 0.1, 0.3: mean 0.2, sd sqrt(0.02), t = 2.
    assert paired_p(0.2, math.sqrt(0.02), 2) == pytest.approx(1 - 2 * math.atan(2) / math.pi, rel=1e-10)
    # df 2: P(|T| > t) = 1 - t / sqrt(2 + t^2). Differences 1, 2, 3: mean 2, sd 1, t = 2 sqrt(3).
    t = 2 * math.sqrt(3)
    assert paired_p(2.0, 1.0, 3) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-10)
    assert paired_p(-2.0, 1.0, 3) == paired_p(2.0, 1.0, 3)  # two-sided
    assert (paired_p(0.0, 0.0, 4), paired_p(0.1, 0.0, 4)) == (1.0, 0.0)  # the same runs; an exact difference
    with pytest.raises(ValueError, match="two seeds"):
        paired_p(0.1, 0.1, 1)


def test_a_written_interval_gives_back_its_sd_and_p():
    diffs = [0.03, -0.01, 0.05, 0.02, 0.04, 0.00]
    e = mean_interval(diffs)
    sd, p = recovered(e, t_quantile(len(diffs) - 1))
    assert sd == pytest.approx(statistics.stdev(diffs), rel=1e-12)
    assert p == pytest.approx(paired_p(statistics.mean(diffs), statistics.stdev(diffs), 6), rel=1e-12)
    # an interval drawn with the old table's 2.571 comes back exactly with the same quantile
    old = Estimate(e.mean, e.mean - 2.571 * sd / math.sqrt(6), e.mean + 2.571 * sd / math.sqrt(6), 6)
    assert recovered(old, written_quantile(5)) == pytest.approx((sd, p), rel=1e-12)
    with pytest.raises(ValueError, match="one seed"):
        recovered(Estimate(0.1, None, None, 1), 1.0)


def test_holm_by_hand():
    # Four contrasts, raw p 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005, 0.01, 0.03, 0.04.
    #   step 1: 4 x 0.005 = 0.02
    #   step 2: 3 x 0.01  = 0.03
    #   step 3: 2 x 0.03  = 0.06
    #   step 4: 1 x 0.04  = 0.04, raised to the step before: 0.06 (step-down: never below a smaller p's)
    # In the given order: 0.03, 0.06, 0.06, 0.02. At 0.05 the second contrast (raw 0.04) no longer rejects.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([0.02]) == [0.02] and holm([]) == []


def test_holm_is_monotone_and_never_below_the_raw_p():
    rng = random.Random(7)
    for _ in range(200):
        ps = [rng.random() ** rng.choice((1, 3)) for _ in range(rng.randrange(1, 12))]
        adjusted = holm(ps)
        assert all(p <= a <= 1 for p, a in zip(ps, adjusted))
        order = sorted(range(len(ps)), key=lambda i: ps[i])
        assert all(adjusted[i] <= adjusted[j] for i, j in zip(order, order[1:]))  # same order as the raw p


def test_the_detectable_effect_has_the_power_it_says():
    from scipy import stats

    for n, alpha in ((12, 0.05 / 42), (6, 0.05 / 8), (4, 0.05)):
        sd = 0.02
        mde = detectable(sd, n, alpha)
        k, lam = n - 1, mde * math.sqrt(n) / sd
        c = stats.t.ppf(1 - alpha / 2, k)
        assert stats.nct.sf(c, k, lam) + stats.nct.cdf(-c, k, lam) == pytest.approx(0.8, abs=1e-8)
    assert detectable(0.02, 12, 0.05 / 42) > detectable(0.02, 12, 0.05) > detectable(0.02, 24, 0.05)
    assert detectable(0.04, 12, 0.05) == pytest.approx(2 * detectable(0.02, 12, 0.05))
    # many seeds: the normal approximation (z_{1 - alpha/2} + z_{0.8}) sd / sqrt(n)
    assert detectable(1.0, 10_000, 0.01) * 100 == pytest.approx(2.5758 + 0.8416, abs=2e-3)
    # two seeds at a Holm level: finite, where scipy's nct fails
    assert 100 < detectable(1.0, 2, 0.05 / 42) < 1e4


def fieller_by_grid(method, base, oracle, grid):
    """The ratios r of `grid` whose paired t-test of (method - base) - r (oracle - base) does not reject at 5%."""
    gains = np.array(method) - np.array(base)
    oracle_gains = np.array(oracle) - np.array(base)
    n = len(gains)
    d = gains[None, :] - grid[:, None] * oracle_gains[None, :]
    t = np.abs(d.mean(axis=1)) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return grid[t <= t_quantile(n - 1)]


@pytest.mark.parametrize("case", range(8))
def test_fieller_is_the_set_of_ratios_a_t_test_does_not_reject(case):
    rng = random.Random(case)
    n = (3, 4, 6, 12)[case % 4]
    base = [rng.gauss(0.4, 0.05) for _ in range(n)]
    oracle_gain, method_gain = (0.08, 0.03) if case < 4 else (0.01, 0.02)  # the last four: a noisy oracle gain
    oracle = [b + rng.gauss(oracle_gain, 0.02) for b in base]
    method = [b + rng.gauss(method_gain, 0.02) for b in base]
    share = share_of_gain(method, base, oracle)
    gains = [o - b for o, b in zip(oracle, base)]
    if statistics.mean(gains) <= 0:
        assert share.value is None
        return
    step = 1e-4
    grid = np.arange(-20, 20, step)
    accepted = fieller_by_grid(method, base, oracle, grid)
    significant = statistics.mean(gains) / (statistics.stdev(gains) / math.sqrt(n)) > t_quantile(n - 1)
    if significant:
        assert share.low is not None
        assert accepted.min() == pytest.approx(share.low, abs=2 * step)
        assert accepted.max() == pytest.approx(share.high, abs=2 * step)
        assert share.low <= share.value <= share.high
    else:  # the accepted set runs into the grid's ends: no bounded interval
        assert share.low is None and share.high is None and "unbounded" in str(share)
        assert accepted.min() <= grid[0] + step or accepted.max() >= grid[-1] - step


def test_share_of_gain_known_answers():
    base, oracle = [0.50, 0.60, 0.55], [0.70, 0.80, 0.75]  # the oracle gains 0.2 on every seed
    half = share_of_gain([0.60, 0.70, 0.65], base, oracle)
    assert half.value == pytest.approx(0.5) and (half.low, half.high) == pytest.approx((0.5, 0.5))
    worse = share_of_gain([0.45, 0.55, 0.50], base, oracle)
    assert worse.value == pytest.approx(-0.25) and worse.high < 0
    # a fixed oracle gain b: Fieller's interval is the t-interval of the method's gain divided by b
    noisy = share_of_gain([0.62, 0.66, 0.67], base, oracle)  # gains 0.12, 0.06, 0.12 of 0.2
    gains = mean_interval([0.12, 0.06, 0.12])
    assert noisy.value == pytest.approx(0.5)
    assert (noisy.low, noisy.high) == pytest.approx((gains.low / 0.2, gains.high / 0.2))


def test_share_is_undefined_when_the_oracle_is_no_better():
    base = [0.5, 0.6]
    for oracle in ([0.5, 0.6], [0.45, 0.6], [0.4, 0.65]):  # no gain, a loss, a mean gain of -0.025
        share = share_of_gain([0.7, 0.8], base, oracle)
        assert share.value is None and str(share) == "undefined (oracle no better than baseline)"


def test_share_is_unbounded_when_the_oracle_gain_is_not_significant():
    share = share_of_gain([0.6, 0.6, 0.6], [0.5, 0.5, 0.5], [0.9, 0.9, 0.45])  # one seed's oracle lost
    assert share.value == pytest.approx(0.3 / 0.75)
    assert (share.low, share.high) == (None, None) and "unbounded" in str(share)
    one = share_of_gain([0.6], [0.5], [0.7])
    assert one.value == pytest.approx(0.5) and one.low is None


def test_share_needs_paired_seeds():
    with pytest.raises(ValueError, match="paired seeds"):
        share_of_gain([0.5], [0.4, 0.3], [0.6, 0.7])
