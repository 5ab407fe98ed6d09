"""The long-horizon study's curves at their token checkpoints, and how fast each cell moves the policy.

Reads the finished runs of a study (its `metrics.jsonl` records, as `records.sh` commits them) and prints, per cell,
the mean over its seeds of greedy and sampled pass@1 at every token checkpoint (`train.eval_every_tokens`: the points
the areas are made of, measured, never interpolated), the mean token entropy of the rollouts over the first and the
last quarter of the training steps, the median gradient norm before clipping over the run (mean over seeds), also
as a multiple of the baseline's, and the mean wall time per run (`summary.json`'s `wall_s`) over the timed runs:
`--untimed PATTERN` (a seed folder, `seed5`, or a cell's, `grpo@tuned/seed6`; repeatable) leaves out runs that
shared the machine with other work (plan.md, amendment 10). The report's areas say which cell leads; this table says
when, whether the cells that lead early are the ones that sharpen the policy fastest, and what a run costs.

    python docs/results/long-study/checkpoints.py docs/results/long-study/records/long-main --untimed seed5 \
        > docs/results/long-study/checkpoints-main.md
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from credo.io import read_jsonl


def run_curves(path: Path, timed: bool = True) -> dict:
    """One run's metrics at its token checkpoints, its entropy and gradient-norm summaries, and its wall time (None
    when not `timed`)."""
    records = list(read_jsonl(path))
    checkpoints = {r["token_checkpoint"]: r["eval"] for r in records if "eval" in r and "token_checkpoint" in r}
    steps = [r for r in records if r.get("step", 0) > 0 and "grad_norm" in r]
    quarter = max(1, len(steps) // 4)
    return {
        "greedy": {k: e["greedy_pass@1"] for k, e in checkpoints.items() if "greedy_pass@1" in e},
        "sampled": {k: e["pass@1"] for k, e in checkpoints.items() if "pass@1" in e},
        "entropy_first": statistics.fmean(r["entropy/mean"] for r in steps[:quarter]),
        "entropy_last": statistics.fmean(r["entropy/mean"] for r in steps[-quarter:]),
        "grad_norm": statistics.median(r["grad_norm"] for r in steps),
        "wall_s": json.loads((path.parent / "summary.json").read_text())["wall_s"] if timed else None,
    }


def cell_means(runs: list[dict]) -> dict:
    """The mean over seeds of each run summary; a checkpoint's mean over the seeds that measured it."""
    def at(metric: str) -> dict[int, float]:
        points = sorted({k for run in runs for k in run[metric]})
        return {k: statistics.fmean(run[metric][k] for run in runs if k in run[metric]) for k in points}

    walls = [run["wall_s"] for run in runs if run["wall_s"] is not None]
    return {"seeds": len(runs), "greedy": at("greedy"), "sampled": at("sampled"),
            "wall_s": statistics.fmean(walls) if walls else None, "timed": len(walls),
            **{key: statistics.fmean(run[key] for run in runs)
               for key in ("entropy_first", "entropy_last", "grad_norm")}}


def tokens(value: int) -> str:
    """300000 -> 300k, 1200000 -> 1.2M."""
    return f"{value / 1e6:g}M" if value >= 1_000_000 else f"{value / 1e3:g}k" if value else "0"


def untimed(label: str, seed_folder: str, patterns: tuple[str, ...]) -> bool:
    """Whether a run (`label`/`seed_folder`) is one of the `--untimed` patterns: `seed5` or `grpo@tuned/seed6`."""
    return seed_folder in patterns or f"{label}/{seed_folder}" in patterns


def table(study: Path, difficulty: str = "default", untimed_runs: tuple[str, ...] = ()) -> str:
    spec = yaml.safe_load((study / "study.yaml").read_text())
    baseline = (spec.get("report") or {}).get("baseline")
    cells = {}
    for label in spec["methods"]:
        runs = [run_curves(path, timed=not untimed(label, path.parent.name, untimed_runs))
                for path in sorted((study / difficulty / label).glob("seed*/metrics.jsonl"))
                if (path.parent / "summary.json").is_file()]
        if runs:
            cells[label] = cell_means(runs)
    if not cells:
        raise SystemExit(f"checkpoints.py: no finished run under {study / difficulty}")
    points = sorted({k for c in cells.values() for k in c["sampled"]})
    reference = cells.get(baseline, {}).get("grad_norm")
    heads = " / ".join(tokens(k) for k in points)
    norm_head = f"median grad norm (x `{baseline}`)" if reference else "median grad norm"
    head = (f"| cell | seeds | greedy pass@1 at {heads} | sampled pass@1 at {heads} | token entropy, first → last "
            f"quarter | {norm_head} | wall s per run (timed runs) |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for label, c in cells.items():
        curve = {metric: " / ".join(f"{c[metric][k]:.2f}" if k in c[metric] else "–" for k in points)
                 for metric in ("greedy", "sampled")}
        norm = f"{c['grad_norm']:.3g}" + (f" ({c['grad_norm'] / reference:.1f}x)" if reference else "")
        wall = "–" if c["wall_s"] is None else f"{c['wall_s']:.0f} ({c['timed']})"
        lines.append(f"| `{label}` | {c['seeds']} | {curve['greedy']} | {curve['sampled']} | "
                     f"{c['entropy_first']:.4f} → {c['entropy_last']:.4f} | {norm} | {wall} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="a study's output directory or its committed records")
    parser.add_argument("--difficulty", default="default")
    parser.add_argument("--untimed", action="append", default=[], metavar="PATTERN",
                        help="runs whose wall time is left out: seedN or CELL/seedN (repeatable)")
    args = parser.parse_args()
    if not (args.study / "study.yaml").is_file():
        raise SystemExit(f"checkpoints.py: {args.study}: no study.yaml; give a study's output or records directory")
    options = "".join(f" --untimed {pattern}" for pattern in args.untimed)
    print(f"Made by `python docs/results/long-study/checkpoints.py {args.study}{options}`: means over each cell's "
          "finished seeds; wall time over the timed runs only.\n")
    print(table(args.study, args.difficulty, tuple(args.untimed)))


if __name__ == "__main__":
    main()
