"""Small validators shared by the config dataclasses: each error names the field and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


def check_choice(owner: str, field: str, value: Any, allowed: Collection[Any]) -> None:
    if value not in allowed:
        choices = " | ".join(repr(a) for a in allowed)
        raise ValueError(f"{owner}.{field} = {value!r} is not allowed; choose one of {choices}")


def check_range(
    owner: str,
    field: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Check that `value` is finite and `low <= value <= high` (or strict where `*_open`); either bound may be None."""
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high or not math.isfinite(value):
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
        finite = "" if math.isfinite(value) else "be finite and "
        raise ValueError(f"{owner}.{field} = {value!r} must {finite}lie in {interval}")
