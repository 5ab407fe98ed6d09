"""What perfect blame is worth in rollout tokens: GRPO against `oracle_blame` on the testbed's hard regime.

Both methods train from the same hard-regime testbed model on paired seeds (same prompt stream per seed),
as a small study (`credo.study`, so a killed benchmark resumes). The threshold is the held-out greedy pass@1
that every GRPO seed reaches (the smallest of their best scores); for each method the rollout tokens to
first reach it are read from its learning curve (linear between evaluations) and averaged over seeds.

    python benchmarks/oracle_gap.py                   # 2 seeds, 60 steps, runs in runs/benchmarks/oracle_gap
    python benchmarks/oracle_gap.py --seeds 0 1 2 --steps 80
    python benchmarks/oracle_gap.py --quick           # smoke test in seconds (see quick_overrides)

Last line: `RESULT oracle_token_ratio=<oracle tokens / GRPO tokens>` (below 1: perfect blame learns with
fewer tokens; `inf` if the oracle never reached the threshold; `nan` if GRPO's seeds start at the threshold,
so that there is no learning to compare).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _quick import tiny_testbed

from credo.study.curves import first_crossing
from credo.study.grid import STUDY_FILE, MethodEntry, Study, StudyConfig, run_study
from credo.study.runs import load_runs

HARD = Path(__file__).parents[1] / "configs" / "testbed" / "hard"


def quick_overrides(model: Path) -> dict[str, Any]:
    """The study's overrides under `--quick`, a smoke test in seconds: two steps on `model` (benchmarks/_quick.py's
    tiny untrained testbed model), with tiny rollouts and evaluations; the ratio means nothing there."""
    return {
        "model": {"path": str(model), "attn_implementation": "eager"},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 12},
        "train": {"steps": 2, "eval_every": 1, "checkpoint_every": 2, "log_samples": 2},
        "eval": {"samples": 2, "ks": [1, 2], "max_problems": 2},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--output", type=Path, default=Path("runs/benchmarks/oracle_gap"))
    parser.add_argument("--quick", action="store_true",
                        help="smoke test in seconds: seed 0 only, quick_overrides, a temporary output directory")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        seeds, overrides, output = args.seeds, {"train": {"steps": args.steps}}, args.output
        if args.quick:
            seeds, overrides = [0], quick_overrides(stack.enter_context(tiny_testbed()))
            output = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="oracle_gap_")))
        config = StudyConfig(
            name="oracle-gap", seeds=seeds, set=overrides,
            methods={m: MethodEntry(config=str(HARD / f"{m}.yaml")) for m in ("grpo", "oracle_blame")},
        )
        run_study(Study(config, HARD, output, output / STUDY_FILE), log=print)
        _, runs = load_runs(output)
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
    if tokens["grpo"] == 0:
        ratio = float("nan")
    else:
        ratio = float("inf") if tokens["oracle_blame"] is None else tokens["oracle_blame"] / tokens["grpo"]
    print(f"RESULT oracle_token_ratio={ratio:.4f}")


if __name__ == "__main__":
    main()
