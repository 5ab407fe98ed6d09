"""The agent pilot's pages, made from its reports so that no number on them is typed by hand.

Reads the pilot's report (`report/report.json` and `report/study.yaml`, written by `credo report
docs/results/agents/pilot/records/agent-pilot -o docs/results/agents/pilot/report`) and writes:

- `README.md` in this folder, the results page: the headroom first (per-turn blame against tuned GRPO), each cell's
  per-seed differences to GRPO and its share of the yardstick's gain, update sizes, and the plan's predictions, each
  judged by the rule its amendment 9 fixed before the pilot's runs;
- the block between `BEGIN` and `END` in `docs/guides/agents.md`: the guide's paragraph on what the pilot found.

    python docs/results/agents/pilot/pages.py          # write the pages
    python docs/results/agents/pilot/pages.py --check  # exit 1 where a page is not what the report gives

A pilot of 4 paired seeds is descriptive (its study file's `min_verdict_seeds` is above its seeds): every number here
is a mean with its per-seed values, never a test or a verdict.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from credo.study.analysis import DifficultyResult, MethodRow
from credo.study.document import Heading, Paragraph, Table, replace_marked, to_markdown, write_pages
from credo.study.predictions import Prediction, judged
from credo.study.results import written_areas

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
REGIME = "calc6"
BASELINE = "grpo@tuned"
YARDSTICK = "oracle_steps@tuned"
BEGIN = "<!-- agent-pilot: made by docs/results/agents/pilot/pages.py from its report; edit the script -->"
END = "<!-- /agent-pilot -->"
HEADROOM = (0.10, 0.25)
"""The plan's predicted headroom: the yardstick's mean gain over tuned GRPO in sampled pass@1 area."""
ROOM = 0.05
"""Amendment 9: shares are read only where the yardstick's mean gain is at least this and positive on every seed."""
STEP_SIZE_SLACK = 1.25
"""The plan: a cell whose mean update size differs from GRPO's by more than 25% is read beside a step of its size."""
CONTROLS = (BASELINE, "grpo@lr=1e-04", "grpo@lr=4e-04")
"""GRPO at the common grid's three rates (amendment 9): a cell's step-size control is the nearest by update size."""


@dataclass(frozen=True)
class Pilot:
    """The pilot's report: its result and each cell's per-seed areas of the headline metric."""

    result: DifficultyResult
    areas: dict[str, dict[int, float]]
    rates: dict[str, float]
    """Each cell's learning rate, from the study file."""

    def row(self, cell: str) -> MethodRow | None:
        return next((r for r in self.result.rows if r.method == cell), None)

    def seeds(self) -> str:
        """The baseline's seeds, as a page lists them: `0, 1, 2, 3`."""
        return ", ".join(str(seed) for seed in sorted(self.areas.get(BASELINE, {})))

    def gains(self, cell: str, other: str = BASELINE) -> list[float]:
        """The cell's per-seed differences to `other` in the headline area (seeds both ran, in order)."""
        ours, base = self.areas.get(cell, {}), self.areas.get(other, {})
        return [ours[s] - base[s] for s in sorted(ours) if s in base]

    def update_ratio(self, cell: str, other: str = BASELINE) -> float | None:
        """The cell's mean update size (`optim/update_norm`) over `other`'s."""
        ours, theirs = self.row(cell), self.row(other)
        if ours is None or theirs is None or ours.update_norm is None or theirs.update_norm is None:
            return None
        return ours.update_norm.mean / theirs.update_norm.mean

    def control(self, cell: str) -> str | None:
        """GRPO at the grid rate nearest the cell's update size, where the cell's is more than 25% from tuned GRPO's
        (None: within it, or not measured; the baseline is then its control)."""
        ratio = self.update_ratio(cell)
        if cell in CONTROLS or ratio is None or 1 / STEP_SIZE_SLACK <= ratio <= STEP_SIZE_SLACK:
            return None
        measured = [(abs(math.log(r)), c) for c in CONTROLS if (r := self.update_ratio(cell, c)) is not None]
        return min(measured)[1]

    def room(self) -> bool:
        """Whether the yardstick's gain leaves room to read shares (amendment 9)."""
        gains = self.gains(YARDSTICK)
        return bool(gains) and sum(gains) / len(gains) >= ROOM and min(gains) > 0

    def share(self, cell: str) -> float | None:
        """The cell's mean gain over the yardstick's (a ratio of means; None where the yardstick gains nothing)."""
        ours, theirs = self.gains(cell), self.gains(YARDSTICK)
        if not ours or not theirs or sum(theirs) <= 0:
            return None
        return (sum(ours) / len(ours)) / (sum(theirs) / len(theirs))


def load(folder: Path) -> Pilot | None:
    """The pilot whose report `credo report` wrote into `folder` (None: not written yet)."""
    written = written_areas(folder, REGIME)
    if written is None:
        return None
    study, report, areas = written
    return Pilot(report.result, areas, {cell: spec["set"]["optim"]["lr"] for cell, spec in study["methods"].items()})


# ------------------------------------------------------------------------------------------ the plan's predictions

def mean_of(values: list[float]) -> str:
    return f"{sum(values) / len(values):+.3f} (per seed {', '.join(f'{v:+.3f}' for v in values)})"


def headroom(pilot: Pilot) -> tuple[str, str]:
    gains = pilot.gains(YARDSTICK)
    if not gains:
        return "not measured", "not decided"
    low, high = HEADROOM
    return mean_of(gains), "held" if low <= sum(gains) / len(gains) <= high else "failed"


def share_judge(cell: str, test: Callable[[float, Pilot], bool | None]) -> Callable[[Pilot], tuple[str, str]]:
    """Judged by `test(share, pilot)` where the yardstick leaves room (None from `test`: not decided)."""
    def judge(pilot: Pilot) -> tuple[str, str]:
        share = pilot.share(cell)
        if share is None:
            return "not measured", "not decided"
        measured = f"share {share:.2f}"
        if not pilot.room():
            return measured, "not decided (no room)"
        verdict = test(share, pilot)
        return measured, "not decided" if verdict is None else "held" if verdict else "failed"
    return judge


def within(low: float | None, high: float | None) -> Callable[[float, Pilot], bool]:
    return lambda share, _: (low is None or share >= low) and (high is None or share <= high)


def between(lower: str, upper: str) -> Callable[[float, Pilot], bool | None]:
    def test(share: float, pilot: Pilot) -> bool | None:
        a, b = pilot.share(lower), pilot.share(upper)
        return None if a is None or b is None else min(a, b) <= share <= max(a, b)
    return test


def below(other: str) -> Callable[[float, Pilot], bool | None]:
    def test(share: float, pilot: Pilot) -> bool | None:
        theirs = pilot.share(other)
        return None if theirs is None else share < theirs
    return test


PREDICTIONS: list[Prediction[Pilot]] = [
    Prediction(YARDSTICK, "beats tuned GRPO by about +0.1 to +0.25", "mean gain in [0.10, 0.25]", headroom),
    Prediction("gigpo@tuned", "the largest share among the methods, about half", "share in [0.25, 0.75]",
               share_judge("gigpo@tuned", within(0.25, 0.75))),
    Prediction("mt_grpo@tuned", "a small share", "share below 0.2", share_judge("mt_grpo@tuned", within(None, 0.2))),
    Prediction("mt_grpo_all@tuned", "between the first-turn form and GiGPO", "share between theirs",
               share_judge("mt_grpo_all@tuned", between("mt_grpo@tuned", "gigpo@tuned"))),
    Prediction("srpo_oracle@tuned", "about 0.3", "share in [0.1, 0.5]",
               share_judge("srpo_oracle@tuned", within(0.1, 0.5))),
    Prediction("rrpo@tuned", "less than `srpo_oracle`", "share below `srpo_oracle`'s",
               share_judge("rrpo@tuned", below("srpo_oracle@tuned"))),
    *(Prediction(cell, "a small share (untuned, at GRPO's rate)", "share below 0.2",
                 share_judge(cell, within(None, 0.2)))
      for cell in ("igpo@grpo_rate", "tree_grpo@grpo_rate", "arpo@grpo_rate")),
]


# ------------------------------------------------------------------------------------------ the pages

def first_sentence(pilot: Pilot) -> str:
    """The headroom: what per-turn blame is worth over tuned GRPO here, the first sentence of every finding."""
    gains = pilot.gains(YARDSTICK)
    if not gains:
        return f"Per-turn blame (`{YARDSTICK}`) has no finished run paired with tuned GRPO yet."
    low, high = HEADROOM
    said = (f"Per-turn blame (`{YARDSTICK}`) gains {mean_of(gains)} over tuned GRPO in sampled pass@1 area at equal "
            f"rollout tokens on {len(gains)} paired seeds, against the plan's predicted +{low:.2f} to +{high:.2f}")
    if pilot.room():
        return said + ": room enough to read each method's share of it."
    return said + (f": less than the {ROOM} (positive on every seed) the plan's amendment 9 asks before any share is "
                   "read, so no share is judged: the shares are described only.")


def step_size(r: MethodRow, pilot: Pilot) -> str:
    """The cell's mean update size as a multiple of GRPO's."""
    ratio = pilot.update_ratio(r.method)
    return "–" if ratio is None else f"{r.update_norm.mean:.4f} ({ratio:.2f}x)"


def against_control(cell: str, pilot: Pilot) -> str:
    """The cell's difference to its step-size control, where it has one other than the baseline."""
    if cell in CONTROLS:
        return "(control)"
    control = pilot.control(cell)
    gains = pilot.gains(cell, control) if control else []
    return "–" if not gains else f"`{control}`: {mean_of(gains)}"


def cells_table(pilot: Pilot) -> Table:
    rows = []
    for r in pilot.result.rows:
        gains = pilot.gains(r.method)
        share = pilot.share(r.method)
        rows.append((f"`{r.method}`", f"{pilot.rates[r.method]:.0e}", f"{r.auc.mean:.3f}",
                     "–" if r.method == BASELINE or not gains else mean_of(gains),
                     "–" if r.method in (BASELINE, YARDSTICK) or share is None else f"{share:.2f}",
                     f"{r.final['pass@1'].mean:.3f}" if "pass@1" in r.final else "–",
                     str(r.unstable), step_size(r, pilot), against_control(r.method, pilot)))
    return Table(("cell", "learning rate", "sampled pass@1 area", f"Δ area vs `{BASELINE}`",
                  "share of the yardstick's gain", "final sampled pass@1", "unstable runs",
                  f"update size (x `{BASELINE}`'s)", "Δ area vs GRPO at its step size"), tuple(rows))


def predictions_table(pilot: Pilot) -> tuple[Table, str]:
    rows, counted = judged(PREDICTIONS, pilot)
    return Table(("cell", "predicted", "judged by (amendment 9)", "measured", "outcome"), tuple(rows)), counted


def results_page(pilot: Pilot) -> str:
    predictions, counted = predictions_table(pilot)
    return to_markdown([
        Heading("The agent pilot: what it found", 1),
        Paragraph(BEGIN),
        Paragraph(f"{first_sentence(pilot)} A pilot ([its plan](plan.md)): paired seeds {pilot.seeds()} on the test "
                  "problems, every difference described by its mean and per-seed values, with no "
                  "test and no verdict. Each tuned cell runs at the rate the tuning rule chose "
                  "([tuning](tuning/report.md)); IGPO, Tree-GRPO and ARPO are untuned, at GRPO's rate (amendments 1 "
                  "and 3). The full report: [report](report/report.md)."),
        Heading("Each cell against tuned GRPO"),
        Paragraph("Sampled pass@1 area at equal rollout tokens (400k, the policy's turns), paired by seed; the share "
                  "is a cell's mean gain over the yardstick's; the update size is the mean `optim/update_norm`. A "
                  "cell whose update size is more than 25% from tuned GRPO's is also read beside GRPO at the grid "
                  f"rate nearest its update size ({', '.join(f'`{c}`' for c in CONTROLS)}; amendment 9)."),
        cells_table(pilot),
        Heading("The plan's predictions"),
        Paragraph(f"Written before the runs, judged by the rules amendment 9 fixed before the pilot's runs: "
                  f"{counted}."),
        predictions,
        Paragraph(END),
    ])


def guide_block(pilot: Pilot) -> str:
    """The agents guide's paragraph: the headroom, and each method's mean difference to GRPO."""
    methods = [r for r in pilot.result.rows if r.method not in (*CONTROLS, YARDSTICK) and pilot.gains(r.method)]
    listed = "; ".join(f"`{r.method.split('@')[0]}` {sum(g) / len(g):+.3f}"
                       for r in methods if (g := pilot.gains(r.method)))
    return "\n".join([
        BEGIN,
        f"{first_sentence(pilot)} Each method's mean difference to tuned GRPO in the same area: {listed} "
        f"(seeds {pilot.seeds()}, described, not tested; IGPO, Tree-GRPO and ARPO untuned). The pilot's page: "
        "[docs/results/agents/pilot/](../results/agents/pilot/README.md).",
        END])


def pages(pilot: Pilot) -> dict[Path, str]:
    guide = ROOT / "docs/guides/agents.md"
    return {HERE / "README.md": results_page(pilot),
            guide: replace_marked(guide.read_text(), guide_block(pilot), (BEGIN, END), str(guide),
                                  "## What the pilot found")}


def main(argv: list[str]) -> int:
    pilot = load(HERE / "report")
    if pilot is None:
        print(f"{HERE / 'report'}: no report yet (credo report docs/results/agents/pilot/records/agent-pilot -o "
              "docs/results/agents/pilot/report); the pages are left as they are")
        return 0
    return write_pages(pages(pilot), check="--check" in argv, root=ROOT,
                       script="docs/results/agents/pilot/pages.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
