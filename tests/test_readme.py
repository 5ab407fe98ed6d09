"""The README's library example runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_python_example_runs(capsys):
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    exec(compile(example, "README.md", "exec"), {})
    assert "clip/low_frac" in capsys.readouterr().out
