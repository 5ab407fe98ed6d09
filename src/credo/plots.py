"""Plots (matplotlib, written atomically as PNG): a run's learning curve, and the styles of a study's figures.

A study's figures give every method its own colour and line style, methods of one family (`credo.methods`,
`Method.family`) sharing a hue in the Okabe-Ito palette (distinct under the common colour-vision
deficiencies): `method_styles`. Their legends sit outside the axes (`legend_below`), so a study of 27
methods still shows every curve and every name.
"""

from __future__ import annotations

import colorsys
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from credo.io import default_mode


def learning_curve(records: list[dict], path: Path, *, title: str) -> Path:
    """Held-out greedy and sampled pass@1 against optimiser steps, with the training reward beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = [r for r in records if "eval" in r]
    steps = [r for r in records if "eval" not in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("greedy_pass@1", "greedy pass@1"), ("pass@1", "sampled pass@1")):
        points = [(r["step"], r["eval"][key]) for r in evals if key in r["eval"]]
        if points:
            left.plot(*zip(*points), marker="o", label=label)
    left.set(xlabel="step (rollout batches)", ylabel="held-out accuracy", ylim=(0, 1), title=title)
    left.grid(alpha=0.3)
    if left.lines:
        left.legend()
    if steps:
        right.plot([r["step"] for r in steps], [r["reward/mean"] for r in steps], alpha=0.4, label="reward")
        window = max(1, len(steps) // 20)
        smooth = [sum(r["reward/mean"] for r in steps[max(0, i - window + 1) : i + 1]) / min(window, i + 1)
                  for i in range(len(steps))]
        right.plot([r["step"] for r in steps], smooth, label=f"reward ({window}-step mean)")
    right.set(xlabel="step (rollout batches)", ylabel="training reward", title="training reward")
    right.grid(alpha=0.3)
    right.legend()
    return save_figure(fig, path, dpi=110)


FAMILY_COLOURS = {
    "baseline": "#0072B2",  # blue
    "trace": "#E69F00",  # orange
    "token": "#D55E00",  # vermillion
    "reset": "#009E73",  # bluish green
    "revision": "#CC79A7",  # reddish purple
    "value": "#56B4E9",  # sky blue
    "turn": "#F0E442",  # yellow
    "oracle": "#000000",  # black
}
"""Each method family's hue (Okabe-Ito); labels that name no registered method are drawn in greys."""
FAMILY_NAMES = {"baseline": "blue", "trace": "orange", "token": "vermillion", "reset": "green", "revision": "purple",
                "value": "sky blue", "turn": "yellow", "oracle": "black"}
NEUTRAL = ("#4D4D4D", "#8C6D31", "#7F7F7F", "#393B79", "#637939", "#843C39", "#5254A3", "#8CA252", "#BD9E39", "#AD494A")
"""Colours of labels that name no registered method, when every label is such (else they are grey)."""
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1.5, 1, 1.5, 1, 1.5)), (0, (8, 2)))


@dataclass(frozen=True)
class Style:
    colour: str
    linestyle: str | tuple
    family: str | None


def method_family(label: str) -> str | None:
    """The family of the registered method a study's label names, or None.

    A label is a method name, maybe with a suffix (`grpo_4mb`, `p_trace_tuned`) and/or a setting after `@`
    (`p_trace@decay=0.9`): the longest registered name that the label's part before `@` equals or starts
    with followed by `_`.

    >>> method_family("p_trace@lam=0.9"), method_family("grpo_lambda_tuned"), method_family("srpo_oracle")
    ('trace', 'trace', 'reset')
    >>> method_family("oracle_blame"), method_family("better") is None
    ('oracle', True)
    """
    from credo.methods import METHODS

    name = label.split("@", 1)[0]
    matches = [m for m in METHODS if name == m or name.startswith(m + "_")]
    return METHODS.get(max(matches, key=len)).family if matches else None


def _shades(colour: str, count: int) -> list[str]:
    """`count` distinct shades of `colour`, dark to light around it (never so light that white hides it)."""
    red, green, blue = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    hue, light, sat = colorsys.rgb_to_hls(red, green, blue)
    if count == 1:
        return [colour]
    low, high = (0.0, 0.5) if sat == 0 and light < 0.1 else (max(0.2, light - 0.13), min(0.66, light + 0.17))
    out = []
    for i in range(count):
        r, g, b = colorsys.hls_to_rgb(hue, low + (high - low) * i / (count - 1), sat)
        out.append("#{:02x}{:02x}{:02x}".format(*(round(255 * v) for v in (r, g, b))))
    return out


def method_styles(labels: list[str]) -> dict[str, Style]:
    """A distinct (colour, line style) for every label: one hue per method family, a shade and a line style
    per member (in the labels' order); labels of no registered method get greys (a qualitative palette when
    no label names one). The mapping lists the labels family by family (a legend's order).

    >>> styles = method_styles(["grpo", "grpo_4mb", "p_trace", "oracle_blame"])
    >>> styles["grpo"].colour != styles["grpo_4mb"].colour, styles["p_trace"].family
    (True, 'trace')
    """
    families = {label: method_family(label) for label in labels}
    members: dict[str | None, list[str]] = {}
    for label in labels:
        members.setdefault(families[label], []).append(label)
    styles = {}
    for family, group in members.items():
        if family is None and len(members) == 1:
            colours = [NEUTRAL[i % len(NEUTRAL)] for i in range(len(group))]
        else:
            colours = _shades(FAMILY_COLOURS[family] if family else "#808080", len(group))
        half = (len(group) + 1) // 2  # neighbours (a method and its variant) get shades far apart
        for i, label in enumerate(group):
            styles[label] = Style(colours[(i % 2) * half + i // 2], LINE_STYLES[i % len(LINE_STYLES)], family)
    return {label: styles[label] for label in by_family(styles)}


def by_family(styles: dict[str, Style]) -> list[str]:
    """The labels family by family (`FAMILY_COLOURS`' order, unregistered last), each family in its given order."""
    rank = {family: i for i, family in enumerate(FAMILY_COLOURS)}
    return sorted(styles, key=lambda label: rank.get(styles[label].family, len(rank)))


def family_key(styles: dict[str, Style]) -> str:
    """A legend title naming the hues of the families present ("" when no label names a method)."""
    present = [f for f in FAMILY_COLOURS if any(s.family == f for s in styles.values())]
    if not present:
        return ""
    grey = ", grey: other" if any(s.family is None for s in styles.values()) else ""
    return "colour = method family: " + ", ".join(f"{FAMILY_NAMES[f]}: {f}" for f in present) + grey


def legend_columns(labels: list[str], width_inches: float) -> int:
    """How many legend columns of `labels` (font size 9) a figure `width_inches` wide holds."""
    longest = max((len(label) for label in labels), default=1)
    per_column = 0.8 + 0.085 * longest  # inches: the line sample and the text
    return max(1, min(len(labels), int(width_inches // per_column)))


def legend_rows(labels: list[str], width_inches: float) -> int:
    """The rows `legend_below` takes for `labels` (to make the figure that much taller)."""
    return -(-len(labels) // legend_columns(labels, width_inches))


def legend_below(fig, handles: list, labels: list[str], *, title: str = "") -> None:
    """A figure legend under the axes, as many columns as the figure's width holds (the figure must use the
    constrained layout, which makes room for it)."""
    fig.legend(handles, labels, loc="outside lower center", ncols=legend_columns(labels, fig.get_figwidth()),
               fontsize=9, title=title or None, title_fontsize=9, frameon=False, handlelength=3.2)


def fitted_range(values: list[float], *, low: float = 0.0, high: float = 1.0, pad: float = 0.05) -> tuple[float, float]:
    """A y-range around `values` with `pad` of their span on each side, kept within [low, high].

    >>> fitted_range([0.2, 0.6])
    (0.18, 0.62)
    """
    if not values:
        return low, high
    bottom, top = min(values), max(values)
    margin = max(pad * (top - bottom), 0.01)
    return round(max(low, bottom - margin), 6), round(min(high, top + margin), 6)


def save_figure(fig, path: Path, *, dpi: int = 100) -> Path:
    """Write a matplotlib figure as PNG atomically (temp file, then rename) and close it."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.fchmod(fd, default_mode())
    os.close(fd)
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
    return path
