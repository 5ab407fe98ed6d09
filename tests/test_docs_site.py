"""The manual builds as a site in strict mode: `mkdocs build --strict` fails on a broken link, a missing anchor or
page, an absolute or unrecognised link, a page left out of the nav and a docstring the API pages cannot render
(mkdocs.yml's `validation`), so this test is the docs' CI. Skipped only where mkdocs is not installed (the `docs`
extra, which the `test` extra pulls in)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from credo.methods import METHODS

ROOT = Path(__file__).parents[1]


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # BaseLoader: !!python tags aside
    pages = nav_pages(config["nav"])
    assert "architecture.md" in pages and "method-registry.md" in pages
    for page in pages:
        stem = page.removesuffix(".md")
        stem = stem.removesuffix("README").removesuffix("index").rstrip("/")
        assert (site / stem / "index.html").exists(), page

    # the method page is the registry's: the `credo methods --markdown` table and a section per method
    registry = (site / "method-registry" / "index.html").read_text()
    assert "<!-- credo methods" not in registry
    for name in METHODS:
        assert f'id="{name}"' in registry, name
        assert f"<td>{name}</td>" in registry, name
    # the API pages come from the docstrings, and doctest blocks render as code
    assert "RolloutBatch" in (site / "api" / "credo.batch" / "index.html").read_text()
    assert '<span class="gp">&gt;&gt;&gt; </span>' in (site / "api" / "credo.losses" / "index.html").read_text()
