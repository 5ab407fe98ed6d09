"""examples/study_power.py: the spread of paired area differences and the seeds it takes, on runs with known areas."""

from __future__ import annotations

import math

import pytest
import yaml
from example_scripts import load_example
from test_report import make_run

from credo.study.curves import Curve
from credo.study.runs import load_runs
from credo.study.stats import t_quantile


def test_paired_spread_of_known_areas(tmp_path):
    """Flat curves: a run's area is its height. Differences 0.10, 0.20, 0.30 over three seeds: sd 0.1."""
    power = load_example("study_power")
    study = {"name": "s", "seeds": [0, 1, 2], "methods": {"grpo": {"config": "g.yaml"}, "new": {"config": "n.yaml"}},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo"}}
    tmp_path.joinpath("study.yaml").write_text(yaml.safe_dump(study))
    for seed in range(3):
        make_run(tmp_path / "default" / "grpo" / f"seed{seed}", "grpo", seed, (0.3, 0.3, 0.3))
        height = 0.3 + 0.1 * (seed + 1)
        make_run(tmp_path / "default" / "new" / f"seed{seed}", "new", seed, (height,) * 3)
    row = power.pair_spread(load_runs(tmp_path)[1]["default"], "new", "grpo", problems=100)
    assert (row["seeds"], row["budget"]) == (3, 2000)
    assert row["mean"] == pytest.approx(0.2) and row["sd"] == pytest.approx(0.1)
    assert row["half_width"] == pytest.approx(t_quantile(2) * 0.1 / math.sqrt(3))  # t_{0.975, 2} = 4.303
    assert [row[f"seeds_for_{t}"] for t in power.TARGETS] == [power.seeds_for(row["sd"], t) for t in power.TARGETS]
    for sd in (0.037, 0.053, 0.11):  # the fewest seeds whose half-width reaches the target
        for target in power.TARGETS:
            n = power.seeds_for(sd, target)
            assert power.half_width(sd, n) <= target < power.half_width(sd, n - 1)
    # a flat curve at p: the evaluation-noise bound is sqrt(p (1 - p) / problems); mean over both methods' runs
    expected = (3 * math.sqrt(0.21 / 100) + sum(math.sqrt(p * (1 - p) / 100) for p in (0.4, 0.5, 0.6))) / 6
    assert row["eval_sd"] == pytest.approx(expected)


def test_the_evaluation_bound_weighs_points_by_their_span():
    power = load_example("study_power")
    curve = Curve((0, 10, 30), (0.5, 0.5, 0.0))
    # trapezoid weights over [0, 30]: 5, 15, 10 (of 30); the last point scores 0 and adds nothing
    assert power.eval_sd(curve, 30, 4) == pytest.approx((5 + 15) / 30 * math.sqrt(0.25 / 4))


def test_a_single_shared_seed_is_an_error(tmp_path):
    power = load_example("study_power")
    study = {"name": "s", "seeds": [0, 1], "methods": {"grpo": {"config": "g.yaml"}, "new": {"config": "n.yaml"}},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo"}}
    tmp_path.joinpath("study.yaml").write_text(yaml.safe_dump(study))
    make_run(tmp_path / "default" / "grpo" / "seed0", "grpo", 0, (0.3, 0.3, 0.3))
    make_run(tmp_path / "default" / "new" / "seed0", "new", 0, (0.3, 0.3, 0.3))
    with pytest.raises(ValueError, match="share 1 finished seed"):
        power.pair_spread(load_runs(tmp_path)[1]["default"], "new", "grpo")
