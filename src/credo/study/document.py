"""A small document model, rendered as Markdown or as a self-contained HTML page (the report's two forms)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from credo.io import printable, write_text_atomic


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Image:
    path: str
    """Relative to the document."""
    alt: str


Block = Heading | Paragraph | Bullets | Code | Table | Image


def to_markdown(blocks: list[Block]) -> str:
    """
    >>> print(to_markdown([Heading("R", 1), Table(("a", "b"), (("1", "2|3"),))]))
    # R
    <BLANKLINE>
    | a | b |
    | --- | --- |
    | 1 | 2\\|3 |
    <BLANKLINE>
    """
    out = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Code):
            out.append(f"```\n{block.text}\n```")
        elif isinstance(block, Table):
            cells = [block.header, tuple("---" for _ in block.header), *block.rows]
            out.append("\n".join("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells))
        else:
            out.append(f"![{block.alt}]({block.path})")
    return "\n\n".join(out) + "\n"


def replace_marked(text: str, block: str, markers: tuple[str, str], where: str, heading: str | None = None) -> str:
    """`text` with the part between its one pair of `markers` (both included) replaced by `block`, which carries the
    markers itself: how a results script rewrites its paragraph in a page people also edit. A text holding neither
    marker gets the block at its end under `heading` where one is given; anything else is an error naming `where`.

    >>> replace_marked("a\\n<b>\\nold\\n</b>\\nz\\n", "<b>\\nnew\\n</b>", ("<b>", "</b>"), "page.md")
    'a\\n<b>\\nnew\\n</b>\\nz\\n'
    """
    begin, end = markers
    if begin not in text and end not in text and heading is not None:
        return text.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise SystemExit(f"{where}: needs exactly one pair of markers ({begin} ... {end})")
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[:start] + block + text[stop:]


def write_pages(pages: dict[Path, str], *, check: bool, root: Path, script: str) -> int:
    """Write each page's text (atomically), or with `check` write nothing and name each page whose file is not that
    text: a results script's two modes. Returns the exit status: 1 where `check` found a stale page, else 0."""
    stale = [path for path, text in pages.items() if check and (not path.exists() or path.read_text() != text)]
    if not check:
        for path, text in pages.items():
            write_text_atomic(path, text)
    for path in stale:
        print(f"{path.relative_to(root)} is not what the reports give: run python {script}")
    return 1 if stale else 0


def to_html(blocks: list[Block], title: str) -> str:
    body = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in block.items) + "</ul>")
        elif isinstance(block, Code):
            body.append(f"<pre>{_escape(block.text)}</pre>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{_escape(c)}</th>" for c in block.header)
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            body.append(f'<img src="{_escape(block.path)}" alt="{_escape(block.alt)}">')
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}img{max-width:100%}pre{background:#f4f4f4;padding:8px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _escape(text: str) -> str:
    """`text` for an HTML page: its markup characters escaped, and its control characters written as escapes
    (`credo.io.printable`; a page read from a shared folder's names shows them, passes none to a terminal)."""
    return html.escape(printable(text, None, newlines=True))


SAFE_LINK = re.compile(r"(https?://|[A-Za-z0-9_.#/-])[^\s\x00-\x1f]*")
"""A link target a report may hold: http(s), or a relative path or an anchor (no `javascript:`, no `data:`)."""


def _inline(text: str) -> str:
    """Escaped text with Markdown's `code` spans and [links](target) kept; a link whose target is not http(s) nor a
    relative path or anchor (`SAFE_LINK`: a method named `[x](javascript:...)` in a study file) stays text.

    >>> _inline("[page](plots/a.png) [x](javascript:alert(1)) [y](https://example.org/a)")
    '<a href="plots/a.png">page</a> [x](javascript:alert(1)) <a href="https://example.org/a">y</a>'
    """
    escaped = _escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)

    def link(match: re.Match) -> str:
        label, target = match.groups()
        relative = ":" not in target.split("/", 1)[0]
        safe = SAFE_LINK.fullmatch(target) and (relative or re.match(r"https?://", target))
        return f'<a href="{target}">{label}</a>' if safe else match.group()

    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", link, escaped)
