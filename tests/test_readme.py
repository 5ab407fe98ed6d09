"""The README's library example runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_python_examples_run(capsys):
    # Every ```python block runs as written: the library example (it prints the loss metrics) and the reward
    # module of "Bring your own reward and data" (its functions called with TRL's and verl's arguments).
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(examples) == 2
    namespaces = []
    for example in examples:
        namespace: dict = {}
        exec(compile(example, "README.md", "exec"), namespace)
        namespaces.append(namespace)
    assert "clip/low_frac" in capsys.readouterr().out
    rewards = next(n for n in namespaces if "accuracy" in n)
    completions = ["so \\boxed{4}", "it is 5"]
    assert rewards["accuracy"](["2+2?"] * 2, completions, solution=["4", "4"]) == [1.0, 0.0]
    assert rewards["brevity"](completions) == [None, None]
    assert rewards["compute_score"]("arith", "so 4", "4") == {"score": 1.0}
