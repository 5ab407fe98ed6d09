"""One Markdown table from the JSON files of `credo gradient-variance --json`: a row per config, a column per file.

    python examples/gradient_variance_table.py start=docs/results/long-study/gradient_variance_start.json \
        trained=docs/results/long-study/gradient_variance_trained.json

Each `NAME=FILE` gives a column named NAME (a policy, say). A cell reads `V/S ± se, **vs first ± se**, cosine`:
the relative variance V/S of the method's gradient estimate (3 significant figures) with its jackknife standard
error (2), its ratio to the relative variance of the file's first config on the same draws (paired draw by draw;
**1** for the first config itself, "not resolved" where either signal is indistinguishable from 0), and the mean
cosine between two draws' gradients (`credo.gradient_variance`). A config a file did not measure gets "–". The lines
under the table name each column's reference config, its draws and, off policy, the optimiser steps before the
measured mini-batch and how far they moved each config's weights.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def number(value: float, digits: int = 3) -> str:
    """`digits` significant figures, thousands separated: 0.0812, 14.7, 9,070."""
    if not math.isfinite(value):
        return "∞"
    return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{float(f'{value:.{digits}g}'):g}"


def cell(row: dict, first: bool) -> str:
    relative = number(row["relative_variance"])
    if math.isfinite(row["relative_variance"]) and math.isfinite(row["relative_variance_se"]):
        relative += f" ± {number(row['relative_variance_se'], 2)}"
    if first:
        versus = "**1**"
    elif math.isfinite(row["vs_first"]) and math.isfinite(row["vs_first_se"]):
        versus = f"**{row['vs_first']:.2f} ± {row['vs_first_se']:.2f}**"
    else:
        versus = "**not resolved**"
    return f"{relative}, {versus}, {row['mean_cosine']:.3f}"


def read(columns: list[str]) -> dict[str, dict[str, dict]]:
    """`{column name: {config path: row}}` from the `NAME=FILE` arguments, in their order."""
    found = {}
    for argument in columns:
        name, separator, path = argument.partition("=")
        if not separator or not name or not path:
            sys.exit(f"gradient_variance_table.py: {argument!r}: give NAME=FILE, e.g. start=gradient_variance_start.json")
        try:
            rows = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            sys.exit(f"gradient_variance_table.py: {path}: not a JSON file of `credo gradient-variance` ({error})")
        if not isinstance(rows, dict) or not rows or not all(isinstance(r, dict) and "relative_variance" in r
                                                              for r in rows.values()):
            sys.exit(f"gradient_variance_table.py: {path}: not a JSON file of `credo gradient-variance`")
        found[name] = rows
    return found


def table(columns: list[str]) -> str:
    found = read(columns)
    configs = list(dict.fromkeys(config for rows in found.values() for config in rows))
    heads = [f"{name}: V/S, **vs first**, cosine" for name in found]
    lines = ["| config (method) | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for config in configs:
        method = next(rows[config]["method"] for rows in found.values() if config in rows)
        cells = [cell(rows[config], config == next(iter(rows))) if config in rows else "–" for rows in found.values()]
        lines.append(f"| `{Path(config).stem}` ({method}) | " + " | ".join(cells) + " |")
    lines.append("")
    for name, rows in found.items():
        reference, row = next(iter(rows.items()))
        where = ", the whole batch at ratio 1"
        if row.get("after_steps"):
            moved = ", ".join(f"`{Path(config).stem}` {r['weights_moved']:.3g}" for config, r in rows.items())
            where = (f", mini-batch {row['after_steps'] + 1} after {row['after_steps']} optimiser steps (weights moved "
                     f"in norm: {moved})")
        lines.append(f"- {name}: first config `{reference}`, {row['draws']} draws{where}.")
    return "\n".join(lines)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not arguments or any(a.startswith("-") for a in arguments):
        sys.exit("usage: python examples/gradient_variance_table.py NAME=FILE [NAME=FILE...]")
    print(table(arguments))
