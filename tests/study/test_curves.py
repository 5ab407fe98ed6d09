"""The arithmetic of a comparison: areas, crossings, t-intervals, the share of the oracle's gain."""

from __future__ import annotations

import math
import statistics

import pytest

from credo.study.curves import Curve, area, first_crossing, mean_curve, mean_interval, share_of_gain, t_quantile


def test_curve_is_linear_between_points_and_flat_outside():
    curve = Curve((0, 10, 30), (0.2, 0.4, 0.8))
    assert [curve.at(x) for x in (-5, 0, 5, 10, 20, 30, 99)] == pytest.approx([0.2, 0.2, 0.3, 0.4, 0.6, 0.8, 0.8])
    with pytest.raises(ValueError, match="must not decrease"):
        Curve((0, 2, 1), (0, 0, 0))
    with pytest.raises(ValueError, match="as many x as y"):
        Curve((0, 1), (0.5,))


def test_area_is_the_mean_height_of_the_curve():
    curve = Curve((0, 10, 30), (0.2, 0.4, 0.8))
    # [0, 10]: trapezoid 10 * 0.3 = 3; [10, 30]: 20 * 0.6 = 12 -> 15 / 30
    assert area(curve, 30) == pytest.approx(0.5)
    # [0, 20]: 3 + 10 * (0.4 + 0.6) / 2 = 8 -> 8 / 20
    assert area(curve, 20) == pytest.approx(0.4)
    assert area(Curve((0, 1), (0.7, 0.7)), 0.5) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="must lie in"):
        area(curve, 31)


def test_first_crossing_interpolates_and_reports_never():
    curve = Curve((0, 100, 200, 300), (0.1, 0.3, 0.2, 0.7))
    assert first_crossing(curve, 0.05) == 0.0
    assert first_crossing(curve, 0.2) == pytest.approx(50.0)
    assert first_crossing(curve, 0.5) == pytest.approx(260.0)  # 200 + 100 * (0.5 - 0.2) / 0.5
    assert first_crossing(curve, 0.71) is None


def test_t_quantiles_and_the_interval():
    assert [t_quantile(df) for df in (1, 2, 4, 9, 29, 30, 1000)] == [12.706, 4.303, 2.776, 2.262, 2.060, 2.042, 1.960]
    values = [0.41, 0.47, 0.52, 0.44]
    estimate = mean_interval(values)
    half = 3.182 * statistics.stdev(values) / math.sqrt(4)
    assert estimate.mean == pytest.approx(statistics.mean(values))
    assert (estimate.low, estimate.high) == pytest.approx((estimate.mean - half, estimate.mean + half))
    single = mean_interval([0.3])
    assert (single.mean, single.low, single.high, str(single)) == (0.3, None, None, "0.300")


def test_share_of_gain_known_answers():
    base, oracle = [0.50, 0.60, 0.55], [0.70, 0.80, 0.75]  # the oracle gains 0.2 on every seed
    half = share_of_gain([0.60, 0.70, 0.65], base, oracle)
    assert half.value == pytest.approx(0.5) and (half.low, half.high) == pytest.approx((0.5, 0.5))
    worse = share_of_gain([0.45, 0.55, 0.50], base, oracle)
    assert worse.value == pytest.approx(-0.25) and worse.high < 0
    noisy = share_of_gain([0.62, 0.66, 0.67], base, oracle)  # gains 0.12, 0.06, 0.12 -> 0.3 / 0.6
    assert noisy.value == pytest.approx(0.5)
    assert noisy.low == pytest.approx(0.3) and noisy.high == pytest.approx(0.6)  # resamples: all 0.06 ... all 0.12


def test_share_is_undefined_when_the_oracle_is_no_better():
    base = [0.5, 0.6]
    for oracle in ([0.5, 0.6], [0.45, 0.6], [0.4, 0.65]):  # no gain, a loss, a mean gain of -0.025
        share = share_of_gain([0.7, 0.8], base, oracle)
        assert share.value is None and str(share) == "undefined (oracle no better than baseline)"


def test_share_interval_is_unbounded_when_a_resample_has_no_oracle_gain():
    share = share_of_gain([0.6, 0.6, 0.6], [0.5, 0.5, 0.5], [0.9, 0.9, 0.45])  # one seed's oracle lost
    assert share.value == pytest.approx(0.3 / 0.75)
    assert (share.low, share.high) == (None, None) and "unbounded" in str(share)


def test_share_needs_paired_seeds():
    with pytest.raises(ValueError, match="paired seeds"):
        share_of_gain([0.5], [0.4, 0.3], [0.6, 0.7])


def test_mean_curve_interpolates_seeds_onto_a_common_grid():
    a = Curve((0, 100, 200), (0.0, 1.0, 1.0))
    b = Curve((0, 50, 150), (0.0, 0.5, 0.5))
    grid, estimates = mean_curve([a, b], points=4)
    assert grid == pytest.approx([0, 50, 100, 150])  # up to the shorter curve's end
    assert [e.mean for e in estimates] == pytest.approx([0.0, 0.5, 0.75, 0.75])
