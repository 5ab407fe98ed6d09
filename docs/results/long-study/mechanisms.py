"""Tabulate phase 0 of the long-horizon study: what each method's mechanism acts on in the regime.

Reads the step records (`metrics.jsonl`) of `credo compare configs/studies/plan/long_mechanisms.yaml` (two training
steps of every method from the regime's model, seed 100) and prints, per method, the mean over its steps of the
records that describe its mechanism: the share of groups with no advantage, its credit statistics (`credit/*`), its
sampler's records (`resets/*`, `revisions/*`, `vine/*`, `spo/*`, `spo_tree/*`, `fr3e/*`), rollout tokens per step,
the response length and the largest probability ratio of a step (1 where every update is on policy). The plan (`plan.md`) quotes the table.

    python docs/results/long-study/mechanisms.py runs/studies/plan-long-mechanisms > docs/results/long-study/mechanisms.md
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from credo.io import read_jsonl

SHARED = ("rollout/tokens", "response/length_mean", "reward/accuracy", "credit/zero_adv_groups",
          "credit/blame_precision", "ratio/max")
"""Records every method's table row shows."""
OWN = ("credit/", "resets/", "revision", "vine/", "spo/", "spo_tree/", "fr3e/", "dapo/")
"""Prefixes of the records a method's own mechanism writes."""


def step_means(path: Path) -> dict[str, float]:
    """The mean over a run's training steps of each numeric record."""
    steps = [r for r in read_jsonl(path) if r.get("step", 0) > 0 and "loss/policy" in r]
    keys = {k for r in steps for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {k: statistics.fmean(r[k] for r in steps if k in r) for k in sorted(keys)}


def cell(value: float | None, spec: str) -> str:
    """A table cell: `value` formatted, or a dash where the method does not record it."""
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the phase-0 study's output directory")
    parser.add_argument("--difficulty", default="default")
    args = parser.parse_args()
    runs = sorted((args.study / args.difficulty).glob("*/seed*/metrics.jsonl"))
    if not runs:
        raise SystemExit(f"no metrics.jsonl under {args.study / args.difficulty}")
    print("# Phase 0: what each mechanism acts on in the long-horizon regime\n")
    print(f"Made by `python docs/results/long-study/mechanisms.py {args.study}` from two training steps per method "
          "(seed 100, the regime's model). Means over the steps.\n")
    print("| method | rollout tokens / step | response tokens | accuracy | groups with no advantage | blame precision "
          "| largest ratio | its own records |")
    print("|---|---|---|---|---|---|---|---|")
    for path in runs:
        if not (path.parent / "summary.json").exists():
            continue  # a run still going (or stopped): its steps are not all there
        method = path.parent.parent.name
        means = step_means(path)
        shared = [cell(means.get(k), ",.0f" if k == "rollout/tokens" else ".3f")
                  for k in ("rollout/tokens", "response/length_mean", "reward/accuracy", "credit/zero_adv_groups",
                            "credit/blame_precision", "ratio/max")]
        own = [f"`{k}` {v:.3g}" for k, v in means.items()
               if k.startswith(OWN) and k not in SHARED and k != "credit/adv_abs_mean"]
        print(f"| `{method}` | " + " | ".join(shared) + " | " + (", ".join(own) or "–") + " |")


if __name__ == "__main__":
    main()
