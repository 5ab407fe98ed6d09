"""Every shipped study file loads and each of its cells is a valid run config, so a typo in a study that runs for
hours is caught before its first run (`credo compare` validates the whole grid the same way), and none holds a cell
that `credo compare` would refuse as a repeat of another (`credo.study.grid.repeated_cells`)."""

from pathlib import Path

import pytest

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
