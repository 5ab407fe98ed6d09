"""examples/study_verdicts.py: one table of verdicts across written study reports, read from their report.json."""

from __future__ import annotations

import pytest
import yaml
from example_scripts import load_example
from test_report import CURVES, SHIFT, make_run

from credo.study.report import write_report


def written_report(root, name, like_for_like=None, skip=(), secondary=()):
    study = {"name": name, "seeds": [0, 1], "methods": {m: {"config": f"{m}.yaml"} for m in CURVES},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": "oracle_blame",
                                                         "like_for_like": like_for_like or {}, "min_verdict_seeds": 2,
                                                         "secondary": list(secondary)}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, ys in CURVES.items():
        if method in skip:
            continue
        for seed, shift in SHIFT.items():
            make_run(root / "default" / method / f"seed{seed}", method, seed, [y + shift if y > 0.2 else y for y in ys])
    write_report(root, root / "report")
    return root / "report"


def test_a_table_of_verdicts_across_reports(tmp_path):
    """Areas (test_report): grpo 0.40, better 0.55, worse 0.30, oracle 0.70, each seed shifted alike, so every
    paired difference is exact (a zero-width interval excludes 0 unless the difference is 0)."""
    verdicts = load_example("study_verdicts")
    first = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    second = written_report(tmp_path / "b", "second", skip=("worse",))
    text = verdicts.table([first, second])
    lines = text.splitlines()
    assert lines[0] == "| method | first · default | second · default |"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert "`grpo`" not in rows  # the baseline has no difference to itself
    assert rows["`better`"] == "| `better` | +0.150 [+0.150, +0.150] beats (<0.001) | +0.150 [+0.150, +0.150] beats (<0.001) |"
    assert rows["`worse`"] == "| `worse` | -0.100 [-0.100, -0.100] falls behind (<0.001) | – |"
    assert rows["`oracle_blame`"].count("+0.300 [+0.300, +0.300] beats (<0.001)") == 2
    assert rows["`better` vs `worse`"] == "| `better` vs `worse` | +0.250 [+0.250, +0.250] beats (<0.001) | – |"
    assert lines[-2] == "| contrasts in the Holm family (m) | 4 | 2 |"
    assert lines[-1].startswith("| MDE at 80% power after Holm (level 0.05 / m) | ")  # next test: its numbers


def test_cells_carry_the_raw_interval_and_the_holm_verdict():
    from credo.study.analysis import Contrast
    from credo.study.stats import Estimate

    verdicts = load_example("study_verdicts")
    assert verdicts.cell(None) == "–"
    assert verdicts.cell(Contrast(Estimate(0.02, None, None, 1), None, None)) == "+0.020 (one seed)"
    survey = Contrast(Estimate(0.02, 0.0, 0.04, 2), 0.014, None, values=(0.01, 0.03), descriptive=True)
    assert verdicts.cell(survey) == "+0.020 (per seed +0.010, +0.030), descriptive"
    assert verdicts.cell(Contrast(Estimate(0.01, -0.01, 0.03, 6), 0.02, 0.3, 0.6)) == \
        "+0.010 [-0.010, +0.030] not distinguishable (0.600)"
    # a raw interval that excludes 0, not significant after Holm
    assert verdicts.cell(Contrast(Estimate(-0.05, -0.08, -0.02, 6), 0.03, 0.01, 0.07)) == \
        "-0.050 [-0.080, -0.020] not distinguishable (0.070)"
    assert verdicts.cell(Contrast(Estimate(-0.05, -0.08, -0.02, 6), 0.03, 0.001, 0.004)) == \
        "-0.050 [-0.080, -0.020] falls behind (0.004)"
    assert verdicts.cell(Contrast(Estimate(0.0, 0.0, 0.0, 6), 0.0, 1.0, 1.0)) == "+0.000 [+0.000, +0.000] identical"


def test_the_detectable_effect_row_is_the_reports(tmp_path):
    """Noisy areas: the MDE row is the family's (`credo.study.analysis.Family`), as the report states it."""
    import json

    verdicts = load_example("study_verdicts")
    root = tmp_path / "a"
    study = {"name": "noisy", "seeds": [0, 1, 2], "methods": {m: {"config": f"{m}.yaml"} for m in ("grpo", "a", "b")},
             "difficulties": {"default": {}}, "report": {"baseline": "grpo", "oracle": None, "min_verdict_seeds": 2}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    heights = {"grpo": (0.3, 0.3, 0.3), "a": (0.4, 0.42, 0.47), "b": (0.3, 0.35, 0.31)}
    for method, by_seed in heights.items():
        for seed, height in enumerate(by_seed):
            make_run(root / "default" / method / f"seed{seed}", method, seed, (height,) * 3)
    write_report(root)
    family = json.loads((root / "report.json").read_text())["default"]["family"]
    last = verdicts.table([root]).splitlines()[-1]
    assert family["mde"] > 0 and last == f"| MDE at 80% power after Holm (level 0.05 / m) | {family['mde']:.3f} (3 seeds) |"


def test_common_keeps_the_rows_every_report_has(tmp_path):
    """`worse` and the pair `better` vs `worse` are only in the first report: `--common` drops their rows, not the
    methods both ran, and the MDE row stays."""
    verdicts = load_example("study_verdicts")
    first = written_report(tmp_path / "a", "first", like_for_like={"better": "worse"})
    second = written_report(tmp_path / "b", "second", skip=("worse",))
    text = verdicts.table([first, second], common=True)
    rows = [line.split(" | ")[0].removeprefix("| ") for line in text.splitlines()[2:]]
    assert rows == ["`better`", "`oracle_blame`", "contrasts in the Holm family (m)",
                    "MDE at 80% power after Holm (level 0.05 / m)"]
    assert len(verdicts.table([first, second]).splitlines()) == len(rows) + 4  # without it: `worse` and the pair


def test_two_reports_of_the_same_runs_get_a_column_each_named_by_their_metric(tmp_path):
    """`credo report --metric` on the same runs: the same study and difficulty, so each column names its headline
    metric instead of the second replacing the first."""
    verdicts = load_example("study_verdicts")
    greedy = written_report(tmp_path / "a", "same")  # the study's headline: greedy pass@1
    sampled = tmp_path / "sampled"
    write_report(tmp_path / "a", sampled, headline="pass@1")
    lines = verdicts.table([greedy, sampled]).splitlines()
    assert lines[0] == ("| method | same · default · greedy_pass@1 | same · default · pass@1 | "
                        "same · default: verdicts agree |")
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    # pass@1 is half of greedy pass@1 in every run (test_report.make_run), and so is each difference
    assert rows["`better`"] == ("| `better` | +0.150 [+0.150, +0.150] beats (<0.001) | "
                                "+0.075 [+0.075, +0.075] beats (<0.001) | yes |")


def test_a_secondary_endpoint_gets_a_column_in_its_regimes_one_family(tmp_path):
    """`report.secondary` (the long study's greedy pass@1 since the protocol issue): a column of its own, named by
    its metric, its verdicts from the same Holm family as the headline's, whose size is given once; like-for-like
    pairs are the headline's alone."""
    verdicts = load_example("study_verdicts")
    report = written_report(tmp_path / "a", "joint", like_for_like={"better": "worse"}, secondary=["pass@1"])
    lines = verdicts.table([report]).splitlines()
    assert lines[0] == ("| method | joint · default · greedy_pass@1 | joint · default · pass@1 | "
                        "joint · default: verdicts agree |")
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert rows["`better`"] == ("| `better` | +0.150 [+0.150, +0.150] beats (<0.001) | "
                                "+0.075 [+0.075, +0.075] beats (<0.001) | yes |")
    assert rows["`better` vs `worse`"] == "| `better` vs `worse` | +0.250 [+0.250, +0.250] beats (<0.001) | – | – |"
    assert lines[-2] == "| contrasts in the Holm family (m) | 7 | (same family) |  |"  # 3 + 1 like-for-like + 3


def test_agreement_compares_the_verdict_words():
    from credo.study.analysis import Contrast
    from credo.study.stats import Estimate

    agreement = load_example("study_verdicts").agreement
    beats = Contrast(Estimate(0.05, 0.02, 0.08, 6), 0.02, 0.001, 0.004)
    behind = Contrast(Estimate(-0.05, -0.08, -0.02, 6), 0.02, 0.001, 0.004)
    unclear = Contrast(Estimate(0.05, -0.02, 0.12, 6), 0.05, 0.2, 0.6)
    assert agreement([beats, beats]) == "yes" and agreement([beats, behind]) == "no"
    assert agreement([beats, unclear]) == "no" and agreement([unclear, unclear]) == "yes"
    assert agreement([beats, None]) == "–" and agreement([Contrast(Estimate(0.02, None, None, 1), None, None)] * 2) == "–"


def test_a_folder_that_is_no_report_is_a_one_line_error(tmp_path):
    verdicts = load_example("study_verdicts")
    with pytest.raises(SystemExit, match=f"study_verdicts.py: {tmp_path}: no study.yaml; give report folders"):
        verdicts.table([tmp_path])
