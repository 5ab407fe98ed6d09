"""What perfect blame is worth in rollout tokens: GRPO against `oracle_blame` on the testbed's hard regime.

Both methods train from the same hard-regime testbed model on paired seeds (same prompt stream per seed),
as a small study (`credo.study`, so a killed benchmark resumes). The threshold is the held-out greedy pass@1
that every GRPO seed reaches (the smallest of their best scores); for each method the rollout tokens to
first reach it are read from its learning curve (linear between evaluations) and averaged over seeds.

    python benchmarks/oracle_gap.py                   # 2 seeds, 60 steps, runs in runs/benchmarks/oracle_gap
    python benchmarks/oracle_gap.py --seeds 0 1 2 --steps 80

Last line: `RESULT oracle_token_ratio=<oracle tokens / GRPO tokens>` (below 1: perfect blame learns with
fewer tokens; `inf` if the oracle never reached the threshold).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from credo.study.curves import first_crossing
from credo.study.grid import MethodEntry, Study, StudyConfig, run_study
from credo.study.report import load_runs

HARD = Path(__file__).parents[1] / "configs" / "testbed" / "hard"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--output", type=Path, default=Path("runs/benchmarks/oracle_gap"))
    args = parser.parse_args()
    config = StudyConfig(
        name="oracle-gap", seeds=args.seeds, set={"train": {"steps": args.steps}},
        methods={m: MethodEntry(config=str(HARD / f"{m}.yaml")) for m in ("grpo", "oracle_blame")},
    )
    run_study(Study(config, HARD, args.output), log=print)
    _, runs = load_runs(args.output)
    grpo, oracle = runs["default"]["grpo"], runs["default"]["oracle_blame"]
    curves = {name: [r.curve("greedy_pass@1", "rollout_tokens") for r in method_runs]
              for name, method_runs in (("grpo", grpo), ("oracle_blame", oracle))}
    threshold = min(max(c.y) for c in curves["grpo"])
    print(f"threshold: held-out greedy pass@1 {threshold:.3f} (reached by every GRPO seed)")
    tokens = {}
    for name, method_curves in curves.items():
        crossings = [first_crossing(c, threshold) for c in method_curves]
        finals = ", ".join(f"{c.y[-1]:.3f}" for c in method_curves)
        shown = ", ".join("never" if x is None else f"{x:,.0f}" for x in crossings)
        print(f"{name:>13}: tokens to threshold per seed {shown}; final greedy per seed {finals}")
        tokens[name] = None if None in crossings else statistics.mean(crossings)
    ratio = float("inf") if tokens["oracle_blame"] is None else tokens["oracle_blame"] / tokens["grpo"]
    print(f"RESULT oracle_token_ratio={ratio:.4f}")


if __name__ == "__main__":
    main()
