"""MkDocs hooks of credo's manual (`mkdocs.yml`: `hooks:`): the parts generated at build time.

- A page line `<!-- credo methods --markdown -->` becomes the method table exactly as `credo methods --markdown`
  prints it, `<!-- credo methods: each -->` a section per method with each credit and loss switch, its default and
  what it does (what `credo methods NAME` prints) and links to the method's section and readings in `methods.md`,
  and `<!-- credo methods: samplers -->` the samplers' table. All of it comes from the registry of the checked-out
  source (`src/` goes first on `sys.path`), so the page cannot go stale.
- Doctest blocks (`>>>` lines with their output, up to a blank line) outside fenced code become `pycon` code
  blocks, so the API pages show the docstrings' examples as code rather than as nested block quotes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from markdown import Extension
from markdown.extensions.toc import slugify
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parent
SPEC = "methods.md"
FENCE = re.compile(r"^\s*(```|~~~)")
MARKERS = ("<!-- credo methods --markdown -->", "<!-- credo methods: each -->", "<!-- credo methods: samplers -->")


class _Doctests(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fence: str | None = None
        i = 0
        while i < len(lines):
            line = lines[i]
            opened = FENCE.match(line)
            if fence is not None:
                if opened and opened.group(1) == fence:
                    fence = None
                out.append(line)
                i += 1
                continue
            if opened:
                fence = opened.group(1)
                out.append(line)
                i += 1
                continue
            if line.lstrip().startswith(">>>"):
                indent = len(line) - len(line.lstrip())
                block = []
                while i < len(lines) and lines[i].strip():
                    block.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i].lstrip())
                    i += 1
                out += ["", " " * indent + "```pycon", *(" " * indent + b for b in block), " " * indent + "```", ""]
                continue
            out.append(line)
            i += 1
        return out


class DoctestBlocks(Extension):
    """Fences doctest blocks as `pycon` code (before the fenced-code preprocessor, priority 25, reads them)."""

    def extendMarkdown(self, md) -> None:
        md.preprocessors.register(_Doctests(md), "credo_doctests", 29)


@event_priority(100)  # before mkdocstrings reads the Markdown extensions
def on_config(config, **kwargs):
    config.markdown_extensions.append(DoctestBlocks())
    src = str(ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    return config


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    if not any(marker in markdown for marker in MARKERS):
        return markdown
    spec = Path(config.docs_dir, SPEC).read_text()
    prefix = "../" * page.file.src_uri.count("/")
    markdown = markdown.replace(MARKERS[0], method_table())
    markdown = markdown.replace(MARKERS[1], each_method(spec, prefix + SPEC))
    return markdown.replace(MARKERS[2], sampler_table())


def method_table() -> str:
    """`credo methods --markdown`, run through the CLI itself."""
    from typer.testing import CliRunner

    from credo.cli import app

    result = CliRunner().invoke(app, ["methods", "--markdown"])
    if result.exit_code != 0:
        raise RuntimeError(f"credo methods --markdown failed: {result.output}")
    return result.output.strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _sections(spec: str) -> list[tuple[str, str, list[str]]]:
    """`(heading, anchor, its subheadings)` of every `## ` section of the specification."""
    sections: list[tuple[str, str, list[str]]] = []
    for line in spec.splitlines():
        if line.startswith("## "):
            sections.append((line[3:], slugify(line[3:], "-"), []))
        elif line.startswith("### ") and sections:
            sections[-1][2].append(line[4:])
    return sections


def _spec_section(method, sections):
    """The method's section of the specification: the first whose heading cites its paper, else its family's."""
    for section in sections:
        if f"arXiv {method.paper}" in section[0]:
            return section
    fallback = {"baseline": "1. Baselines", "oracle": "6. Evaluation and the yardstick"}[method.family]
    return next(s for s in sections if s[0] == fallback)


def each_method(spec: str, spec_link: str) -> str:
    """A section per registered method: what `credo methods NAME` prints, with links into the specification."""
    from credo.methods import METHODS, attribute_docs, needs_in_full

    sections = _sections(spec)
    out = []
    for name in METHODS:
        method = METHODS.get(name)
        heading, anchor, subheadings = _spec_section(method, sections)
        paper = "credo's own" if method.paper == "credo" else f"arXiv [{method.paper}](https://arxiv.org/abs/{method.paper})"
        links = [f"specification: [{heading}]({spec_link}#{anchor})"]
        links += [f"[{sub}]({spec_link}#{slugify(sub, '-')})" for sub in subheadings if sub.startswith("Readings we chose")]
        out += [f"### `{name}`", "",
                f"{method.family} · {paper} · " + " · ".join(links), "",
                f"{method.changes}.", "",
                f"- sampler: {method.sampler.describe()}: {method.sampler.draws}",
                f"- needs: {needs_in_full(method)}"]
        if method.loss.on_policy() != method.loss:
            out.append(f"- on policy (`optim.minibatches` = `epochs` = 1): its {type(method.loss).__name__} "
                       f"{method.loss.on_policy_inert}; `credo compare` refuses a cell that this makes the twin of another")
        out.append("")
        for part, obj in (("credit", method.estimator), ("loss", method.loss)):
            docs = attribute_docs(type(obj))
            out += [f"**{part}: `{type(obj).__name__}`**", "", "| switch | default | what it does |", "|---|---|---|"]
            for key, value in method.switches()["estimator" if part == "credit" else "loss"].items():
                out.append(f"| `{part}.{key}` | `{_cell(repr(value))}` | {_cell(docs.get(key, ''))} |")
            out.append("")
    return "\n".join(out).rstrip()


def sampler_table() -> str:
    """The samplers' table that `credo methods` prints under the method table."""
    from credo.rollout.samplers import SAMPLERS

    out = ["| sampler | draws | records | options |", "|---|---|---|---|"]
    for name in SAMPLERS:
        sampler = SAMPLERS.get(name)
        options = f"`rollout.{name}`" if sampler.options else "`rollout`"
        records = ", ".join(f"`{r}`" for r in sorted(sampler.records)) or "-"
        out.append(f"| `{name}` | {_cell(sampler.draws)} | {records} | {options} |")
    return "\n".join(out)
