"""Token-level credit heatmaps (HTML): what each method's update did to each token of sample responses.

Reads the samples a run logged (`samples.jsonl`: tokens, reward, first wrong step, `credit` =
`-rows * dLoss/dlogp`, see `credo.diagnostics`) at one step of each method's first seed. Red tokens are
pushed down, green ones up, the shade scaled to the row's largest magnitude; the tokens of a failed
response from its first wrong step on are underlined, so one sees at a glance whether the blame lands
there. With the same seed, i.i.d. samplers draw the same responses at step 1, so their rows differ only
by credit.
"""

from __future__ import annotations

import html
from pathlib import Path

from credo.io import iter_jsonl, write_text_atomic

SHADES = 10
"""Steps of colour intensity (CSS classes n0..n10 for negative credit, p0..p10 for positive)."""


def samples_at(run_dir: Path, step: int) -> list[dict]:
    """The samples a run logged at `step` with their credit, read from `samples.jsonl` one line at a time
    (up to the first later step: the file is in step order)."""
    found = []
    for record in iter_jsonl(run_dir / "samples.jsonl"):
        if record["step"] > step:
            break
        if record["step"] == step and "credit" in record:
            found.append(record)
    return found


def render_row(sample: dict) -> str:
    """One response as coloured token spans (title: the token's credit)."""
    credit = sample["credit"]
    scale = max((abs(c) for c in credit), default=0.0) or 1.0
    start = sample.get("blame_start")
    blamed_from = start if not sample["correct"] and start is not None and start >= 0 else None
    spans = []
    for t, (token, value) in enumerate(zip(sample["tokens"], credit)):
        shade = f"{'n' if value < 0 else 'p'}{round(SHADES * min(1.0, abs(value) / scale))}"
        blamed = " b" if blamed_from is not None and t >= blamed_from else ""
        spans.append(f'<span class="{shade}{blamed}" title="{value:+.4f}">{html.escape(token)}</span>')
    verdict = "correct" if sample["correct"] else f"wrong from step {sample['first_wrong_step']}"
    return (f'<div class="row"><span class="meta">{html.escape(sample["prompt"])} · reward {sample["reward"]:g} · '
            f'{verdict}</span><br><code>{"".join(spans)}</code></div>')


def write_heatmap(runs_by_method: dict, path: Path, *, step: int, title: str) -> Path:
    """One HTML page, a section per method (its first seed's samples at `step`)."""
    sections = []
    for method, runs in runs_by_method.items():
        if not runs:
            continue
        run = min(runs, key=lambda r: r.seed)
        samples = samples_at(run.path, step)
        rows = "".join(render_row(s) for s in samples) or "<p>no samples with credit logged at this step</p>"
        sections.append(f"<h2>{html.escape(method)} <small>(seed {run.seed})</small></h2>{rows}")
    shades = "".join(f".n{i}{{background:rgba(220,40,40,{i / SHADES:.1f})}}.p{i}{{background:rgba(30,150,60,{i / SHADES:.1f})}}"
                     for i in range(SHADES + 1))
    style = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto}code{font-size:15px;white-space:pre}"
             ".row{margin:6px 0}.meta{color:#555;font-size:12px}.b{text-decoration:underline;text-decoration-thickness:2px}"
             + shades)
    legend = ("<p>Credit of a token = −rows · dLoss/dlogp of its mini-batch (summed over the step's updates): red pushes the "
              "token down, green up, shade relative to the row's largest |credit|. Underlined: a failed response's "
              "tokens from its first wrong step on (where perfect blame would fall). Hover a token for its value.</p>")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style>"
            f"</head><body><h1>{html.escape(title)}</h1>{legend}{''.join(sections)}</body></html>\n")
    write_text_atomic(path, page)
    return path
