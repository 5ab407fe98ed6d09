"""The geometry of learning curves: areas (interpolated and on measured points), token checkpoints, crossings."""

from __future__ import annotations

import pytest

from credo.study.curves import (
    Curve,
    area,
    checkpoint_curve,
    common_x,
    first_crossing,
    mean_curve,
    measured_area,
    measured_difference,
)


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


def test_the_measured_area_uses_measured_points_only():
    curve = Curve((0, 10, 15, 20, 30), (0.2, 0.4, 0.9, 0.6, 0.7))
    # over (0, 10, 20, 30), skipping the point at 15: (0.3 + 0.5 + 0.65) / 3 trapezoids of width 10
    assert measured_area(curve, (0, 10, 20, 30)) == pytest.approx(1.45 / 3)
    assert area(curve, 30) != pytest.approx(1.45 / 3)  # the interpolated area reads the point at 15
    assert measured_area(curve, (10, 20)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not measured at \\[25\\]"):
        measured_area(curve, (0, 25))
    with pytest.raises(ValueError, match="two increasing"):
        measured_area(curve, (10,))


def test_curves_on_different_step_grids_compare_on_the_steps_both_measured():
    every_5 = Curve((0, 5, 10, 15, 20, 25, 30), (0.2, 0.9, 0.3, 0.9, 0.4, 0.9, 0.5))
    every_12 = Curve((0, 12, 24, 30), (0.2, 0.3, 0.4, 0.6))
    assert common_x([every_5, every_12]) == (0, 30) and common_x([every_5, every_12], up_to=20) == (0,)
    # over (0, 30): (0.2 + 0.5) / 2 - (0.2 + 0.6) / 2; the spikes at 5, 15, 25 are no measured common point
    assert measured_difference(every_5, every_12) == pytest.approx(-0.05)
    assert measured_difference(every_5, Curve((0, 12), (0.2, 0.3))) is None  # one common step: no area


def test_token_checkpoints_are_served_by_the_first_evaluation_at_or_after_them():
    records = [(0, 0, 0.2), (1000, 1040, 0.4), (3000, 3050, 0.8), (4000, 4000, 0.9)]
    curve, overshoot = checkpoint_curve(records, 1000)
    assert curve.x == (0, 1000, 2000, 3000, 4000) and curve.y == (0.2, 0.4, 0.8, 0.8, 0.9)
    assert overshoot == 1050  # checkpoint 2000, served at 3050 tokens
    with pytest.raises(ValueError, match="not the next multiple"):
        checkpoint_curve([(0, 0, 0.2), (1500, 1500, 0.3)], 1000)
    with pytest.raises(ValueError, match="not the next multiple"):
        checkpoint_curve([(0, 0, 0.2), (1000, 1000, 0.3), (1000, 1200, 0.3)], 1000)


def test_mean_curve_interpolates_seeds_onto_a_common_grid():
    a = Curve((0, 100, 200), (0.0, 1.0, 1.0))
    b = Curve((0, 50, 150), (0.0, 0.5, 0.5))
    grid, estimates = mean_curve([a, b], points=4)
    assert grid == pytest.approx([0, 50, 100, 150])  # up to the shorter curve's end
    assert [e.mean for e in estimates] == pytest.approx([0.0, 0.5, 0.75, 0.75])
