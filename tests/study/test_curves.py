"""The geometry of learning curves: areas at exact budgets, lateness after token checkpoints, crossings."""

from __future__ import annotations

import pytest

from credo.study.curves import Curve, area, first_crossing, lateness, mean_curve


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


def test_a_late_evaluation_earns_no_area_at_an_exact_budget():
    """Two runs on the same rising line y = x / 4000, one evaluated on each checkpoint of 1000 tokens, one 40% of a
    spacing late: at the exact budget 4000 both areas are the line's, 0.5. Taking each checkpoint's first evaluation
    at or after it as its value (the estimator this replaced) gives the late run 0.5875: +0.0875 for being late."""
    on_time = Curve((0, 1000, 2000, 3000, 4000), (0.0, 0.25, 0.5, 0.75, 1.0))
    late = Curve((0, 1400, 2400, 3400, 4400), (0.0, 0.35, 0.6, 0.85, 1.1))
    assert area(on_time, 4000) == pytest.approx(0.5) and area(late, 4000) == pytest.approx(0.5)
    served = [late.y[next(i for i, x in enumerate(late.x) if x >= c)] for c in (0, 1000, 2000, 3000, 4000)]
    assert sum((a + b) / 2 for a, b in zip(served, served[1:])) / 4 == pytest.approx(0.5875)


def test_lateness_is_the_wait_for_the_next_evaluation_as_a_share_of_the_spacing():
    assert lateness((0, 1040, 3050, 4000), 1000, 4000) == pytest.approx((0.0, 0.04, 1.05, 0.05, 0.0))
    assert lateness((0, 1000, 2000), 1000, 1500) == (0.0, 0.0)  # checkpoints up to the budget only
    with pytest.raises(ValueError, match="before the budget"):
        lateness((0, 1000), 1000, 2000)


def test_mean_curve_interpolates_seeds_onto_a_common_grid():
    a = Curve((0, 100, 200), (0.0, 1.0, 1.0))
    b = Curve((0, 50, 150), (0.0, 0.5, 0.5))
    grid, estimates = mean_curve([a, b], points=4)
    assert grid == pytest.approx([0, 50, 100, 150])  # up to the shorter curve's end
    assert [e.mean for e in estimates] == pytest.approx([0.0, 0.5, 0.75, 0.75])
