"""docs/results/agents/pilot/pages.py: the agent pilot's results page and the agents guide's paragraph, made from a
written report with the pilot's own cells and report settings (configs/studies/agent_pilot.yaml)."""

from __future__ import annotations

import json

import pytest
import yaml
from example_scripts import REPO, load_script
from test_ranking_pages import rows_of
from test_report import make_run

from credo.study.grid import ReportConfig
from credo.study.results import report_json, results_from_runs

SEEDS = range(4)
HEIGHTS = {  # each cell's greedy curve height; sampled pass@1 (the headline) is half of it (test_report.make_run)
    "grpo@tuned": 0.40, "oracle_steps@tuned": 0.80, "gigpo@tuned": 0.60, "mt_grpo@tuned": 0.44,
    "mt_grpo_all@tuned": 0.50, "rrpo@tuned": 0.60, "srpo_oracle@tuned": 0.52, "igpo@grpo_rate": 0.40,
    "tree_grpo@grpo_rate": 0.30, "arpo@grpo_rate": 0.46, "grpo@lr=1e-04": 0.36, "grpo@lr=4e-04": 0.34,
}
UPDATE_SIZES = {"grpo@lr=1e-04": 0.03, "grpo@lr=4e-04": 0.09, "tree_grpo@grpo_rate": 0.08, "arpo@grpo_rate": 0.035}
"""Every other cell 0.05 (tuned GRPO's): Tree-GRPO's 1.6x is nearest GRPO at 4e-4 (0.09), ARPO's 0.7x nearest 1e-4."""
"""The yardstick gains 0.2 in sampled area; gigpo 0.1 (share 0.5), mt_grpo 0.02 (0.1), mt_grpo_all 0.05 (0.25, between
theirs), srpo_oracle 0.06 (0.3), rrpo 0.1 (0.5, above srpo_oracle's), igpo 0, tree_grpo -0.05, arpo 0.03 (0.15)."""


def write_pilot(root, heights=HEIGHTS, seed_gain=None):
    """A written report of the pilot's study file over `heights`; `seed_gain` adds to the yardstick's seed 0."""
    study = yaml.safe_load((REPO / "configs/studies/agent_pilot.yaml").read_text())
    study["difficulties"] = {"calc6": {}}
    root.mkdir()
    (root / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    for cell, height in heights.items():
        for seed in SEEDS:
            y = height + 0.01 * seed + (seed_gain if seed_gain is not None and seed == 0 and
                                        cell == "oracle_steps@tuned" else 0.0)
            make_run(root / "calc6" / cell / f"seed{seed}", cell.split("@")[0], seed, [y] * 3,
                     update_norm=UPDATE_SIZES.get(cell, 0.05))
    report = root / "report"
    report.mkdir()
    (report / "study.yaml").write_text((root / "study.yaml").read_text())
    (report / "report.json").write_text(report_json(results_from_runs(root, ReportConfig(**study["report"]))))
    return report


@pytest.fixture(scope="module")
def pages():
    return load_script("docs/results/agents/pilot/pages.py")


def test_the_pilot_file_runs_every_cell_of_the_plan_at_a_chosen_rate(pages):
    study = yaml.safe_load((REPO / "configs/studies/agent_pilot.yaml").read_text())
    assert set(study["methods"]) == set(HEIGHTS) == {p.cell for p in pages.PREDICTIONS} | set(pages.CONTROLS)
    assert study["report"]["min_verdict_seeds"] > len(study["seeds"])  # a pilot: described, never tested
    tuned = yaml.safe_load((REPO / "docs/results/agents/pilot/tuning/tuned_calc6.yaml").read_text())["methods"]
    for cell, spec in study["methods"].items():
        rate = spec["set"]["optim"]["lr"]
        if cell in pages.CONTROLS[1:]:
            assert rate == float(cell.split("=")[1]), cell
            continue
        chosen = tuned[cell if cell.endswith("@tuned") else pages.BASELINE]["set"]["optim"]["lr"]
        assert rate == chosen, cell  # the untuned cells at GRPO's chosen rate


def test_the_page_leads_with_the_headroom_and_reads_shares_where_there_is_room(pages, tmp_path):
    pilot = pages.load(write_pilot(tmp_path / "pilot"))
    page = pages.results_page(pilot)
    first = page.split(pages.BEGIN)[1].strip().splitlines()[0]
    assert first.startswith("Per-turn blame (`oracle_steps@tuned`) gains +0.200 (per seed +0.200, +0.200, +0.200, "
                            "+0.200) over tuned GRPO")
    assert "room enough to read each method's share of it. A pilot ([its plan](plan.md)): paired seeds 0, 1, 2, " \
           "3 " in first
    table = rows_of(page, "| cell | learning rate")
    assert table["`gigpo@tuned`"][3].startswith("+0.100 (per seed") and table["`gigpo@tuned`"][4] == "0.50"
    assert table["`grpo@tuned`"][3:5] == ["–", "–"] and table["`oracle_steps@tuned`"][4] == "–"
    assert table["`tree_grpo@grpo_rate`"][7:9] == ["0.0800 (1.60x)", "`grpo@lr=4e-04`: -0.020 (per seed -0.020, "
                                                   "-0.020, -0.020, -0.020)"]
    assert table["`arpo@grpo_rate`"][7:9] == ["0.0350 (0.70x)", "`grpo@lr=1e-04`: +0.050 (per seed +0.050, "
                                              "+0.050, +0.050, +0.050)"]
    assert table["`gigpo@tuned`"][7:9] == ["0.0500 (1.00x)", "–"]  # within 25%: tuned GRPO is its control
    assert table["`grpo@lr=4e-04`"][8] == "(control)"
    outcomes = {(c[0], c[2]): c[4] for c in rows_of(page, "| cell | predicted").values()}
    judged = {p.cell: p.judge(pilot)[1] for p in pages.PREDICTIONS}
    assert judged == {"oracle_steps@tuned": "held", "gigpo@tuned": "held", "mt_grpo@tuned": "held",
                      "mt_grpo_all@tuned": "held", "srpo_oracle@tuned": "held", "rrpo@tuned": "failed",
                      "igpo@grpo_rate": "held", "tree_grpo@grpo_rate": "held", "arpo@grpo_rate": "held"}
    assert len(outcomes) == len(pages.PREDICTIONS) and "8 held, 1 failed" in page


def test_without_room_no_share_is_judged(pages, tmp_path):
    small = {**HEIGHTS, "oracle_steps@tuned": 0.48, "gigpo@tuned": 0.44}  # the yardstick gains 0.04 < 0.05
    pilot = pages.load(write_pilot(tmp_path / "small", small))
    assert not pilot.room()
    judged = {p.cell: p.judge(pilot) for p in pages.PREDICTIONS}
    assert judged["oracle_steps@tuned"] == ("+0.040 (per seed +0.040, +0.040, +0.040, +0.040)", "failed")
    assert judged["gigpo@tuned"] == ("share 0.50", "not decided (no room)")
    assert "less than the 0.05 (positive on every seed)" in pages.first_sentence(pilot)
    # a large mean gain that one seed contradicts leaves no room either
    split = pages.load(write_pilot(tmp_path / "split", seed_gain=-0.45))
    assert split.gains("oracle_steps@tuned")[0] < 0 and not split.room()


def test_the_guide_block_replaces_only_its_markers_and_check_finds_a_stale_page(pages, tmp_path, monkeypatch):
    pilot = pages.load(write_pilot(tmp_path / "pilot"))
    block = pages.guide_block(pilot)
    assert block.startswith(pages.BEGIN) and block.endswith(pages.END)
    assert "`gigpo` +0.100; `mt_grpo` +0.020" in block and "`tree_grpo` -0.050" in block
    assert "grpo@lr" not in block  # the controls are no methods
    here = tmp_path / "docs/results/agents/pilot"
    here.mkdir(parents=True)
    (tmp_path / "docs/guides").mkdir(parents=True)
    (tmp_path / "docs/guides/agents.md").write_text("# Agents\n\ntext\n")
    monkeypatch.setattr(pages, "HERE", here)
    monkeypatch.setattr(pages, "ROOT", tmp_path)
    (here / "report").symlink_to(tmp_path / "pilot/report")
    assert pages.main(["--check"]) == 1  # nothing written yet
    assert pages.main([]) == 0 and pages.main(["--check"]) == 0
    guide = (tmp_path / "docs/guides/agents.md").read_text()
    assert guide == f"# Agents\n\ntext\n\n## What the pilot found\n\n{block}\n"
    (here / "README.md").write_text(json.dumps("stale"))
    assert pages.main(["--check"]) == 1


def test_the_committed_pages_are_the_scripts_output(pages):
    """Until the pilot's report is committed the script leaves the pages alone and says so."""
    assert pages.main(["--check"]) == 0
