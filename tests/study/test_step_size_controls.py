"""`report.step_size_controls`: each method's contrast to the baseline's recipe at a step as large as its own, in the
regime's one Holm family, written to report.json, named in the tables and the findings."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from test_report import make_run

from credo.study.report import write_report
from credo.study.stats import holm, t_quantile

# Curves (0.2, h, h) at rollout tokens 0, 1000, 2000, three seeds (the heights h below). `big` takes updates twice the
# baseline's size; its control `grpo_big` is grpo at a step as large, made by 4 mini-batches a batch (so its areas at
# equal optimiser updates are not its areas at equal tokens). `steady`'s control `grpo_steady` differs from it by
# (-0.01, 0, +0.01).
HEIGHTS = {"grpo": (0.3, 0.3, 0.3), "big": (0.6, 0.62, 0.61), "grpo_big": (0.5, 0.55, 0.58),
           "steady": (0.41, 0.42, 0.44), "grpo_steady": (0.4, 0.42, 0.45)}
CONTROLS = {"big": "grpo_big", "steady": "grpo_steady"}
UPDATE_SIZES = {"big": 0.02}
"""Mean update sizes (`optim/update_norm`) other than the baseline's 0.01."""


def area(height: float) -> float:
    """The area at equal rollout tokens of the curve (0.2, h, h) over [0, 2000] tokens: the mean of the trapezoids
    (0.2 + h) / 2 and h."""
    return ((0.2 + height) / 2 + height) / 2


def controlled_study(root: Path, **report) -> dict[str, dict]:
    """The study above with `report` laid over its report settings, its report written; its rows by method."""
    study = {"name": "controlled", "seeds": [0, 1, 2], "methods": {m: {"config": f"{m}.yaml"} for m in HEIGHTS},
             "difficulties": {"default": {}},
             "report": {"baseline": "grpo", "oracle": None, "min_verdict_seeds": 2, **report}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    for method, by_seed in HEIGHTS.items():
        for seed, height in enumerate(by_seed):
            run = root / "default" / method / f"seed{seed}"
            make_run(run, method, seed, (0.2, height, height), update_norm=UPDATE_SIZES.get(method, 0.01))
            if method == "grpo_big":
                (run / "config.yaml").write_text(yaml.safe_dump({"optim": {"minibatches": 4, "epochs": 1}}))
    write_report(root)
    return {r["method"]: r for r in json.loads((root / "report.json").read_text())["default"]["methods"]}


def by_hand(ours: str, theirs: str) -> tuple[list[float], float, float]:
    """The per-seed differences of two cells' areas, their mean and the paired t-test's two-sided p on 2 df:
    P(|T_2| > t) = 1 - t / sqrt(2 + t^2)."""
    diffs = [area(a) - area(b) for a, b in zip(HEIGHTS[ours], HEIGHTS[theirs])]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    t = abs(mean) / (sd / math.sqrt(3))
    return diffs, mean, 1 - t / math.sqrt(2 + t * t)


def one_sided(x: float) -> float:
    """P(T_2 > x)."""
    return 0.5 * (1 - x / math.sqrt(2 + x * x))


def tost_by_hand(ours: str, theirs: str, margin: float) -> float:
    """TOST's p at `margin` on 2 df: the larger of the two one-sided tests' p."""
    diffs, mean, _ = by_hand(ours, theirs)
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
    return max(one_sided((mean + margin) / se), one_sided((margin - mean) / se))


FAMILY = [("big", "grpo"), ("big", "grpo_big"), ("grpo_big", "grpo"), ("steady", "grpo"),
          ("steady", "grpo_steady"), ("grpo_steady", "grpo")]
"""The family with the controls: each method against the baseline, and `big` and `steady` against their controls."""


def test_the_control_contrast_is_the_paired_difference_of_the_areas_in_the_holm_family(tmp_path):
    rows = controlled_study(tmp_path / "s", step_size_controls=CONTROLS)
    family = json.loads((tmp_path / "s" / "report.json").read_text())["default"]["family"]
    assert family["contrasts"] == 6  # 4 against the baseline, one per control
    raw = [by_hand(*pair)[2] for pair in FAMILY]
    adjusted = dict(zip(FAMILY, holm(raw)))
    for method, control in CONTROLS.items():
        diffs, mean, p = by_hand(method, control)
        c = rows[method]["auc_vs_step_size_control"]
        assert rows[method]["step_size_control"] == control
        half = t_quantile(2) * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
        assert (c["mean"], c["low"], c["high"], c["n"]) == pytest.approx((mean, mean - half, mean + half, 3))
        assert c["p"] == pytest.approx(p, rel=1e-9)
        assert c["p_holm"] == pytest.approx(adjusted[(method, control)], rel=1e-9)
    assert rows["big"]["auc_vs_step_size_control"]["verdict"] == "not distinguishable"
    assert rows["big"]["auc_vs_baseline"]["p_holm"] == pytest.approx(adjusted[("big", "grpo")], rel=1e-9)
    assert "step_size_control" not in rows["grpo_big"] and "auc_vs_step_size_control" not in rows["grpo"]

    plain = controlled_study(tmp_path / "plain")
    plain_family = json.loads((tmp_path / "plain" / "report.json").read_text())["default"]["family"]
    assert plain_family["contrasts"] == 4
    without = holm([by_hand(*pair)[2] for pair in FAMILY if pair[1] == "grpo"])
    assert plain["big"]["auc_vs_baseline"]["p_holm"] == pytest.approx(without[0], rel=1e-9)
    assert "auc_vs_step_size_control" not in plain["big"]


def test_an_exploratory_method_keeps_its_control_contrast_out_of_the_family(tmp_path):
    rows = controlled_study(tmp_path / "s", step_size_controls=CONTROLS, exploratory=["steady"])
    family = json.loads((tmp_path / "s" / "report.json").read_text())["default"]["family"]
    assert family["contrasts"] == 4  # steady's two contrasts left out
    c = rows["steady"]["auc_vs_step_size_control"]
    assert c["exploratory"] is True and c["p_holm"] is None


def test_equivalence_to_the_control_at_the_plans_margin(tmp_path):
    """`steady`'s area differs from its control's by 0.75 x (+0.01, 0, -0.01): TOST at 0.1 puts it inside the margin,
    Holm over the family's six equivalence tests; without a margin it is only not distinguishable."""
    plain = controlled_study(tmp_path / "plain", step_size_controls=CONTROLS)
    assert plain["steady"]["auc_vs_step_size_control"]["verdict"] == "not distinguishable"
    assert "p_equivalent" not in plain["steady"]["auc_vs_step_size_control"]
    rows = controlled_study(tmp_path / "tost", step_size_controls=CONTROLS, equivalence_margin=0.1)
    c = rows["steady"]["auc_vs_step_size_control"]
    expected = dict(zip(FAMILY, holm([tost_by_hand(*pair, 0.1) for pair in FAMILY])))
    assert c["p_equivalent"] == pytest.approx(expected[("steady", "grpo_steady")], rel=1e-6)
    assert c["verdict"] == "equivalent"
    text = (tmp_path / "tost" / "report.md").read_text()
    assert "against its step-size control `grpo_steady` it is equivalent (TOST at the plan's margin) to it" in text


def test_report_json_keeps_the_control_contrast(tmp_path):
    """Drawn again from report.json's per-seed values, the same rows; from a report.json without them
    (`MethodRow.written`), the control contrast comes back from its interval, in the family."""
    from credo.study.analysis import recovered_result
    from credo.study.grid import ReportConfig

    root = tmp_path / "s"
    rows = controlled_study(root, step_size_controls=CONTROLS)
    write_report(root, tmp_path / "again", from_json=True)
    again = json.loads((tmp_path / "again" / "report.json").read_text())["default"]["methods"]
    assert {r["method"]: r for r in again} == rows

    saved = json.loads((root / "report.json").read_text())["default"]
    del saved["per_seed"]
    for row in saved["methods"]:  # intervals as reports without per-seed values drew them (three-decimal quantile)
        for key in ("auc_vs_baseline", "auc_vs_step_size_control"):
            if row.get(key):
                e = row[key]
                half = (e["high"] - e["low"]) / 2 * 4.303 / t_quantile(2)
                row[key] = {"mean": e["mean"], "low": e["mean"] - half, "high": e["mean"] + half, "n": e["n"]}
    result = recovered_result(saved, ReportConfig(oracle=None, min_verdict_seeds=2, step_size_controls=CONTROLS),
                              "default")
    recovered = {r.method: r for r in result.rows}
    assert result.family.size == 6
    assert recovered["big"].step_size_control == "grpo_big"
    assert recovered["big"].auc_vs_control.p == pytest.approx(rows["big"]["auc_vs_step_size_control"]["p"], rel=1e-9)
    assert recovered["big"].auc_vs_control.p_holm == pytest.approx(
        rows["big"]["auc_vs_step_size_control"]["p_holm"], rel=1e-9)


def test_the_tables_and_findings_name_the_control(tmp_path):
    """`big` beats grpo with updates 2x its size: its finding reads the gain against its control, and points there
    instead of asking for a matched-step comparison the report already made."""
    rows = controlled_study(tmp_path / "s", step_size_controls=CONTROLS)
    text = (tmp_path / "s" / "report.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| method |"))
    assert "| Δ area vs step-size control (raw 95%) | verdict vs step-size control (Holm p) |" in header
    c = rows["big"]["auc_vs_step_size_control"]
    cell = (f"| {c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] vs `grpo_big` | "
            f"not distinguishable ({c['p_holm']:.3f}) |")
    assert cell in text
    finding = next(line for line in text.splitlines() if line.startswith("- `big`"))
    assert (f"; against its step-size control `grpo_big` it is not distinguishable from it ({c['mean']:+.3f}, "
            f"interval {c['low']:+.3f} to {c['high']:+.3f}, Holm p {c['p_holm']:.3f})") in finding
    assert ("its updates are 2.00x the baseline's in size, so the contrast with its step-size control `grpo_big`, not "
            "the baseline's, says whether this gain is credit") in finding
    assert "compare the baseline at a matched step size" not in text
    assert "Holm's correction over this regime's 6 contrasts" in text and "and to its step-size control's" in text
    assert "Δ area vs step-size control: the paired difference to the cell the study names" in text

    controlled_study(tmp_path / "plain")
    plain = (tmp_path / "plain" / "report.md").read_text()
    assert "step-size control" not in plain
    assert "its updates are 2.00x the baseline's in size, so before this gain is called credit, compare" in plain


def test_the_yardsticks_finding_reads_its_gain_against_its_control(tmp_path):
    """An oracle with a step-size control (the ranking plan's `oracle_steps`): its sentence names the contrast too."""
    rows = controlled_study(tmp_path / "s", oracle="big", step_size_controls=CONTROLS)
    c = rows["big"]["auc_vs_step_size_control"]
    finding = next(line for line in (tmp_path / "s" / "report.md").read_text().splitlines()
                   if line.startswith("- The yardstick `big` beats `grpo`"))
    assert f"; against its step-size control `grpo_big` it is not distinguishable from it ({c['mean']:+.3f}," in finding
    assert "so the contrast with its step-size control `grpo_big`, not the baseline's, says whether" in finding


def test_family_figures_hold_the_step_size_controls():
    from credo.study.figures import family_figures
    from credo.study.grid import ReportConfig

    many = ["grpo", "grpo_4mb", "grpo@lr=4e-04", "s_trace", "srpo", "ibpo", "better", "worse", "vine", "rrpo",
            "oracle_blame"]
    figures = family_figures(many, ReportConfig(step_size_controls={"s_trace": "grpo@lr=4e-04"}))
    assert figures["trace"] == ["grpo", "grpo@lr=4e-04", "s_trace", "oracle_blame"]


def test_the_studies_guides_step_size_control_example_loads(tmp_path):
    """docs/guides/studies.md's `report.step_size_controls` example is a valid study (given its name and seeds)."""
    from credo.study.grid import load_study

    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "studies.md").read_text()
    block = re.search(r"```yaml\n(methods:\n.*?step_size_controls.*?)```", guide, re.S)
    assert block, "docs/guides/studies.md: the step-size control example moved"
    testbed = Path(__file__).resolve().parents[2] / "configs" / "testbed"
    path = tmp_path / "study.yaml"
    path.write_text("name: s\nseeds: [0]\n" + block.group(1).replace("../testbed/", f"{testbed}/"))
    study = load_study(path)
    assert study.config.report.step_size_controls == {"s_trace": "grpo_lr4e-4"}
    assert len(study.cells()) == 3


@pytest.mark.parametrize(("controls", "says"), [
    ({"s_trace": "grpo_big"}, "report.step_size_controls s_trace: grpo_big: 'grpo_big' is not one of the methods: "
                              "grpo, s_trace, grpo_4mb$"),
    ({"missing": "grpo_4mb"}, "report.step_size_controls missing: grpo_4mb: 'missing' is not one of the methods"),
    ({"s_trace": "s_trace"}, "report.step_size_controls s_trace: s_trace: a method cannot be its own step-size "
                             "control$"),
    ({"grpo": "grpo_4mb"}, "report.step_size_controls grpo: grpo_4mb: the baseline has no step-size control"),
    ({"s_trace": "grpo"}, "report.step_size_controls s_trace: grpo: the baseline is no step-size control"),
])
def test_a_step_size_control_must_pair_two_methods_of_the_study(tmp_path, controls, says):
    from credo.config import ConfigError
    from credo.study.grid import load_study

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "seeds": [0],
                                    "methods": {"grpo": "g.yaml", "s_trace": "s.yaml", "grpo_4mb": "g4.yaml"},
                                    "report": {"oracle": None, "step_size_controls": controls}}, sort_keys=False))
    with pytest.raises(ConfigError, match=says):
        load_study(path)
