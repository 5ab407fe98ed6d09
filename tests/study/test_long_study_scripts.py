"""The long-horizon study's scripts (docs/results/long-study/): the tuning rule's choice and the phase-0 table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "results" / "long-study"


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tuning_report(per_seed: dict[str, dict[int, tuple[float, float]]]) -> dict:
    """A report.json regime whose cells have the given (sampled, greedy) areas per seed."""
    return {"per_seed": {label: {str(seed): {"area_tokens": {"pass@1": s, "greedy_pass@1": g}}
                                 for seed, (s, g) in seeds.items()}
                         for label, seeds in per_seed.items()}}


def test_the_rule_takes_the_best_mean_area_and_flags_an_edge():
    choose_rates = script("choose_rates")
    report = tuning_report({
        "grpo@lr=5e-05": {100: (0.30, 0.6), 101: (0.34, 0.6)},
        "grpo@lr=1e-04": {100: (0.36, 0.7), 101: (0.36, 0.7)},
        "grpo@lr=2e-04": {100: (0.20, 0.5), 101: (0.22, 0.5)},
        "ibpo@lr=5e-05": {100: (0.40, 0.8)},
        "ibpo@lr=1e-04": {100: (0.398, 0.9)},   # within the tie margin: greedy area decides
        "ibpo@lr=2e-04": {100: (0.10, 0.2)},
        "srpo@lr=1e-04": {100: (0.2, 0.5)},
        "srpo@lr=2e-04": {100: (0.3, 0.5)},      # best at the top edge
    })
    sampled, greedy = choose_rates.areas(report, "pass@1"), choose_rates.areas(report, "greedy_pass@1")
    assert sampled["grpo"][5e-5] == pytest.approx(0.32)
    assert choose_rates.choose(sampled["grpo"], greedy["grpo"], 0.005) == (1e-4, "bracketed")
    assert choose_rates.choose(sampled["ibpo"], greedy["ibpo"], 0.005) == (1e-4, "bracketed")
    assert choose_rates.choose(sampled["ibpo"], greedy["ibpo"], 0.0) == (5e-5, "extend lower")
    assert choose_rates.choose(sampled["srpo"], greedy["srpo"], 0.005) == (2e-4, "extend higher")


def test_a_metric_not_measured_along_the_curve_breaks_no_tie():
    """The decisive retune evaluates greedy only (`eval.samples: 0`): its sampled areas are NaN and must not take
    part, else a tie would go to whichever rate comes first."""
    choose_rates = script("choose_rates")
    nan = float("nan")
    report = tuning_report({"grpo@lr=5e-05": {100: (nan, 0.600)}, "grpo@lr=1e-04": {100: (nan, 0.602)},
                            "grpo@lr=2e-04": {100: (nan, 0.500)}})
    greedy, sampled = choose_rates.areas(report, "greedy_pass@1"), choose_rates.areas(report, "pass@1")
    assert sampled == {}
    assert choose_rates.choose(greedy["grpo"], sampled.get("grpo", {}), 0.005) == (1e-4, "bracketed")


def test_the_phase0_table_reads_finished_runs_only(tmp_path, monkeypatch, capsys):
    mechanisms = script("mechanisms")
    for method, finished in (("grpo", True), ("s_trace", True), ("vine", False)):
        run = tmp_path / "default" / method / "seed100"
        run.mkdir(parents=True)
        steps = [{"step": 0}] + [{"step": s, "loss/policy": 0.1, "rollout/tokens": 40000.0 + s, "ratio/max": 1.0,
                                  "credit/trace_token_share": 0.2} for s in (1, 2)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
        if finished:
            (run / "summary.json").write_text("{}")
    monkeypatch.setattr(sys, "argv", ["mechanisms.py", str(tmp_path)])
    mechanisms.main()
    out = capsys.readouterr().out
    assert "| `grpo` | 40,002 |" in out and "`credit/trace_token_share` 0.2" in out and "`vine`" not in out


def test_the_checkpoint_table_reads_finished_runs_at_their_token_checkpoints(tmp_path):
    checkpoints = script("checkpoints")
    (tmp_path / "study.yaml").write_text("name: s\nmethods: {grpo: g.yaml, fast: f.yaml}\nreport: {baseline: grpo}\n")
    for method, seed, sampled, norm, finished in (("grpo", 0, 0.4, 0.05, True), ("grpo", 1, 0.6, 0.07, True),
                                                  ("fast", 0, 0.7, 0.2, True), ("fast", 1, 0.9, 9.0, False)):
        run = tmp_path / "default" / method / f"seed{seed}"
        run.mkdir(parents=True)
        records = [{"step": 0, "token_checkpoint": 0, "eval": {"greedy_pass@1": 0.2, "pass@1": 0.2}},
                   *({"step": s, "grad_norm": norm * s, "entropy/mean": 0.04 - 0.01 * s} for s in (1, 2, 3, 4)),
                   {"step": 4, "token_checkpoint": 300000, "eval": {"greedy_pass@1": 0.8, "pass@1": sampled}},
                   {"step": 4, "eval": {"greedy_pass@1": 0.1, "pass@1": 0.1}}]  # not at a token checkpoint
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        if finished:
            (run / "summary.json").write_text(json.dumps({"wall_s": 100.0 * (seed + 1)}))
    lines = checkpoints.table(tmp_path).splitlines()
    assert lines[0].startswith("| cell | seeds | greedy pass@1 at 0 / 300k | sampled pass@1 at 0 / 300k |")
    # grpo: median grad norm 2.5 x its 0.05 and 0.07, entropy 0.03 (step 1) -> 0.0 (step 4), wall 100 s and 200 s
    assert lines[2] == "| `grpo` | 2 | 0.20 / 0.80 | 0.20 / 0.50 | 0.0300 → 0.0000 | 0.15 (1.0x) | 150 (2) |"
    assert lines[3] == "| `fast` | 1 | 0.20 / 0.80 | 0.20 / 0.70 | 0.0300 → 0.0000 | 0.5 (3.3x) | 100 (1) |"
    untimed = checkpoints.table(tmp_path, untimed_runs=("grpo/seed1",)).splitlines()
    assert untimed[2].endswith("| 100 (1) |") and untimed[3].endswith("| 100 (1) |")
    assert checkpoints.table(tmp_path, untimed_runs=("seed0",)).splitlines()[3].endswith("| – |")
