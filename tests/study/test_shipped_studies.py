"""Every study file the repository ships validates: each cell's config resolves and no cell repeats another's, so a
study written before its runs cannot fail at its 40th run on a typo."""

from __future__ import annotations

from pathlib import Path

import pytest

from credo.study.grid import check_distinct, load_study

STUDIES = sorted((Path(__file__).resolve().parents[2] / "configs" / "studies").rglob("*.yaml"))


def test_the_glob_finds_the_study_files():
    assert {"long_tuning.yaml", "credit_decisive.yaml"} <= {p.name for p in STUDIES}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_a_shipped_study_file_validates(path: Path, tmp_path: Path):
    study = load_study(path, tmp_path)
    assert study.cells()
    check_distinct(study)
