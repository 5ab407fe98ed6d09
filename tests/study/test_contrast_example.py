"""examples/contrast.py: the paired difference between any two cells of a written report, from its folder alone."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from example_scripts import load_example
from test_report import noisy_study

from credo.study.report import write_report


def written(tmp_path):
    """The noisy study's report folder alone (its runs removed)."""
    root = noisy_study(tmp_path / "study")
    write_report(root, tmp_path / "report")
    shutil.rmtree(root)
    return tmp_path / "report"


def test_two_cells_neither_of_them_the_baseline(tmp_path, capsys):
    """marginal - null per seed: (0.45 - 0.2, 0.5 - 0.3, 0.6 - 0.4) = (0.25, 0.2, 0.2); flat curves, so the areas at
    equal tokens and at equal optimiser updates and the finals are all these. Paired t by hand, df 2: P(|T| > t) = 1 - t /
    sqrt(2 + t^2)."""
    contrast = load_example("contrast")
    folder = written(tmp_path)
    diffs = [0.25, 0.2, 0.2]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    t = mean / (sd / math.sqrt(3))
    p = 1 - t / math.sqrt(2 + t * t)
    half = 0.95 * math.sqrt(2 / (1 - 0.95**2)) * sd / math.sqrt(3)  # df 2: t_q = (2q - 1) sqrt(2 / (1 - (2q - 1)^2))
    contrast.main([str(folder), "marginal", "null"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "noisy · default: `marginal` - `null`, greedy_pass@1; one contrast, its p not corrected for others"
    row = f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] | {p:.3f} | 3 |"
    assert out[4] == f"| area at equal rollout tokens | {row}"
    assert out[5] == f"| area at equal optimiser updates | {row}"
    assert out[6] == f"| final | {row}"
    reverse = contrast.contrast_table(folder, "null", "marginal").splitlines()
    assert reverse[4] == f"| area at equal rollout tokens | {-mean:+.3f} [{-mean - half:+.3f}, {-mean + half:+.3f}] | {p:.3f} | 3 |"


def test_a_metric_measured_only_at_the_end_has_a_final_and_no_area(tmp_path):
    contrast = load_example("contrast")
    folder = written(tmp_path)
    path = folder / "report.json"
    data = json.loads(path.read_text())
    for by_seed in data["default"]["per_seed"].values():
        for values in by_seed.values():
            del values["area_tokens"]["pass@1"], values["area_updates"]["pass@1"]
    path.write_text(json.dumps(data))
    lines = contrast.contrast_table(folder, "marginal", "null", metric="pass@1").splitlines()
    assert lines[4] == "| area at equal rollout tokens | not measured | – | – |"
    assert lines[6].startswith("| final | +0.108 [")  # pass@1 = y / 2


def test_unknown_cells_and_difficulties_are_clear_errors(tmp_path):
    contrast = load_example("contrast")
    folder = written(tmp_path)
    with pytest.raises(SystemExit, match="no cell 'absent'; it has grpo, marginal, null, strong"):
        contrast.contrast_table(folder, "absent", "null")
    with pytest.raises(SystemExit, match="no difficulty 'hard'; it has default"):
        contrast.contrast_table(folder, "marginal", "null", difficulty="hard")


def test_a_report_without_per_seed_values_answers_only_what_it_wrote(tmp_path):
    contrast = load_example("contrast")
    folder = written(tmp_path)
    path = folder / "report.json"
    data = json.loads(path.read_text())
    del data["default"]["per_seed"]
    path.write_text(json.dumps(data))
    lines = contrast.contrast_table(folder, "marginal", "grpo").splitlines()
    assert "p recovered from the written interval" in lines[0]
    row = {r["method"]: r for r in data["default"]["methods"]}["marginal"]["auc_vs_baseline"]
    assert lines[4] == (f"| area at equal rollout tokens | {row['mean']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}] "
                        f"| {row['p']:.3f} | 3 |")
    with pytest.raises(SystemExit, match=r"needs per-seed values \(runs not committed\)"):
        contrast.contrast_table(folder, "marginal", "null")
