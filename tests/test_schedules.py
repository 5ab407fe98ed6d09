"""The learning-rate schedules: linear warm-up, then constant or cosine decay to 0."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from credo.schedules import lr_multiplier, warmup_cosine


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_linear_warm_up(schedule):
    total, warmup = 100, 4
    assert [lr_multiplier(schedule, u, total, warmup) for u in range(warmup)] == pytest.approx([0.25, 0.5, 0.75, 1.0])


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_no_warm_up_starts_at_the_full_rate(schedule):
    assert lr_multiplier(schedule, 0, 10, 0) == 1.0


def test_constant_after_warm_up():
    assert [lr_multiplier("constant", u, 20, 5) for u in range(4, 25)] == [1.0] * 21
    assert [lr_multiplier("constant", u, 20, 0) for u in range(20)] == [1.0] * 20


def test_cosine_decays_to_zero_at_the_end():
    total, warmup = 20, 4
    values = [lr_multiplier("cosine", u, total, warmup) for u in range(warmup, total + 1)]
    assert values[0] == pytest.approx(1.0)
    assert values[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in pairwise(values))  # monotone decay
    middle = warmup + (total - warmup) // 2
    assert lr_multiplier("cosine", middle, total, warmup) == pytest.approx(0.5)
    assert lr_multiplier("cosine", total + 5, total, warmup) == pytest.approx(0.0, abs=1e-12)  # stays at 0


def test_cosine_is_warmup_cosine():
    for u in range(30):
        assert lr_multiplier("cosine", u, 25, 3) == warmup_cosine(u, 25, 3)
    assert warmup_cosine(7, 10, 2) == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 8)))


def test_unknown_schedule_is_an_error():
    with pytest.raises(ValueError, match="schedule"):
        lr_multiplier("linear", 0, 10, 2)
