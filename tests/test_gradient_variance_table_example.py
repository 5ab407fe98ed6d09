"""examples/gradient_variance_table.py: one Markdown table from `credo gradient-variance --json` files."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from example_scripts import EXAMPLES, load_example


def row(method, relative, se, vs_first, vs_se, cosine, **extra):
    return {"method": method, "draws": 64, "relative_variance": relative, "relative_variance_se": se,
            "vs_first": vs_first, "vs_first_se": vs_se, "mean_cosine": cosine, **extra}


@pytest.fixture
def measured(tmp_path):
    on = {"c/grpo.yaml": row("grpo", 0.89, 0.14, 1.0, 0.0, 0.54),
          "c/ibpo.yaml": row("ibpo", 0.93, 0.15, 1.05, 0.10, 0.53)}
    off = {"c/grpo_4mb_ibpo_rate.yaml": row("grpo", 9065.2, math.nan, 1.0, 0.0, 0.018, after_steps=3,
                                            weights_moved=0.0811),
           "c/ibpo.yaml": row("ibpo", 44.2, 15.9, math.inf, math.nan, 0.039, after_steps=3, weights_moved=0.0812)}
    paths = []
    for name, rows in (("on", on), ("off", off)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(rows))  # json writes inf and nan as Infinity and NaN, as `credo` does
        paths.append(path)
    return paths


def test_a_row_per_config_and_a_column_per_file(measured):
    on, off = measured
    text = load_example("gradient_variance_table").table([f"ratio 1={on}", f"off policy={off}"])
    lines = text.splitlines()
    assert lines[0] == "| config (method) | ratio 1: V/S, **vs first**, cosine | off policy: V/S, **vs first**, cosine |"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:] if line.startswith("| ")}
    assert rows["`grpo` (grpo)"] == "| `grpo` (grpo) | 0.89 ± 0.14, **1**, 0.540 | – |"
    assert rows["`ibpo` (ibpo)"] == ("| `ibpo` (ibpo) | 0.93 ± 0.15, **1.05 ± 0.10**, 0.530 | "
                                     "44.2 ± 16, **not resolved**, 0.039 |")
    assert rows["`grpo_4mb_ibpo_rate` (grpo)"] == "| `grpo_4mb_ibpo_rate` (grpo) | – | 9,065, **1**, 0.018 |"
    assert "- ratio 1: first config `c/grpo.yaml`, 64 draws, the whole batch at ratio 1." in lines
    assert ("- off policy: first config `c/grpo_4mb_ibpo_rate.yaml`, 64 draws, mini-batch 4 after 3 optimiser steps "
            "(weights moved in norm: `grpo_4mb_ibpo_rate` 0.0811, `ibpo` 0.0812).") in lines


@pytest.mark.parametrize("argument, says", [("start", "give NAME=FILE"), ("start=missing.json", "not a JSON file"),
                                            ("start=README", "not a JSON file")])
def test_bad_arguments_are_one_line_errors(tmp_path, argument, says):
    (tmp_path / "README").write_text('{"a": 1}')
    done = subprocess.run([sys.executable, str(EXAMPLES / "gradient_variance_table.py"), argument], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 1 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
