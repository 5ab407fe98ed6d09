"""Every shipped study file loads and each of its cells is a valid run config, so a typo in a study that runs for
hours is caught before its first run (`credo compare` validates the whole grid the same way), and none holds a cell
that `credo compare` would refuse as a repeat of another (`credo.study.grid.repeated_cells`)."""

from pathlib import Path

import pytest
import yaml

from credo.study.grid import load_study, repeated_cells

STUDIES = sorted((Path(__file__).parents[2] / "configs" / "studies").rglob("*.yaml"))


def test_the_study_files_are_found():
    assert len(STUDIES) >= 10


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_study_file_gives_valid_cells(path, tmp_path):
    study = load_study(path, tmp_path / "out")
    cells = study.cells()
    assert cells and all(c.config.method for c in cells)
    assert len({(c.difficulty, c.method, c.seed) for c in cells}) == len(cells)
    assert repeated_cells(study, cells) == []


def test_a_study_refuses_seeds_its_tuning_or_pilots_used(tmp_path):
    from credo.config import ConfigError

    base = {"name": "s", "methods": {"grpo": "grpo.yaml"}, "report": {"oracle": None}, "tuning_seeds": [100, 101, 102],
            "pilot_seeds": [0, 1]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**base, "seeds": [1, 2, 3]}))
    with pytest.raises(ConfigError, match=r"seeds \[1\] are also pilot seeds: a study's seeds must be fresh"):
        load_study(path)
    path.write_text(yaml.safe_dump({**base, "seeds": [2, 3], "methods": {"grpo": {"config": "grpo.yaml",
                                                                                   "seeds": [101]}}}))
    with pytest.raises(ConfigError, match=r"seeds \[101\] are also tuning seeds"):
        load_study(path)
    path.write_text(yaml.safe_dump({**base, "seeds": [1, 2, 3], "exploratory": True}))
    assert load_study(path).config.exploratory
    path.write_text(yaml.safe_dump({**base, "seeds": [2, 3]}))
    assert load_study(path).config.seeds == [2, 3]
