"""Multi-turn episodes with each episode's KV cache kept across turns, against re-encoding its context every turn.

`credo.rollout.episodes.sample_episodes` samples a batch of agent episodes turn by turn. Through a `TurnSession`
(`credo.rollout.turn_cache`, the transformers backend's `open_turns`) each turn encodes only what came since the
episode's last forward pass; through the stateless `generate` (any backend) it encodes the episode's whole context
again. Both sample the same batch here, interleaved, on the shipped agent testbed model (6-step chains, 16 turns and
160 tokens an episode, the agent pilot's regime): 16 problems x 8 episodes at temperature 1, as one training step
samples them. Printed: each path's median seconds, the policy tokens sampled and the turns taken, and last
`RESULT turn_cache_speedup=<stateless seconds / session seconds>`.

    PYTHONPATH=src python benchmarks/turn_cache.py            # about two minutes on 2 CPU cores
    PYTHONPATH=src python benchmarks/turn_cache.py --quick    # smoke test on a tiny untrained model
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

CONFIG = Path(__file__).parents[1] / "configs" / "testbed" / "agent" / "grpo.yaml"
REGIME = ["task.min_steps=6", "task.max_steps=6", "task.max_turns=16"]


class Stateless:
    """The backend seen as a plain `GenerationBackend` (no `open_turns`): every turn re-sends the whole context."""

    def __init__(self, backend):
        self.backend, self.tokenizer = backend, backend.tokenizer

    def generate(self, prompts, **kwargs):
        return self.backend.generate(prompts, **kwargs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=8, help="episodes per problem")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke test on a tiny untrained testbed model")
    args = parser.parse_args(argv)
    from _quick import tiny_testbed
    from transformers.utils import logging as hf_logging

    from credo.config import load_config
    from credo.models import load_model
    from credo.rollout.episodes import sample_episodes
    from credo.rollout.generate import encode_prompts
    from credo.rollout.transformers_backend import TransformersBackend
    from credo.tasks import build_task

    hf_logging.set_verbosity_error()
    problems_n, episodes_n, repeats = (2, 2, 1) if args.quick else (args.problems, args.episodes, args.repeats)
    with tiny_testbed() if args.quick else contextlib.nullcontext() as tiny:
        model_path = [f"model.path={tiny}", "model.attn_implementation=eager"] if tiny else []
        config = load_config(str(CONFIG), [*REGIME, *model_path])
        model, tokenizer = load_model(config.model, torch.device("cpu"))
        model.eval()
        task = build_task(config.task)
        problems = list(itertools.islice(task.train_problems(seed=0), problems_n))
        prompts = encode_prompts(tokenizer, [p.prompt for p in problems])
        backend = TransformersBackend(model, tokenizer)
        times: dict[str, list[float]] = {"kept cache": [], "re-encoded": []}
        for repeat in range(repeats):
            for label, chosen in (("kept cache", backend), ("re-encoded", Stateless(backend))):
                torch.manual_seed(repeat)
                started = time.perf_counter()
                episodes = sample_episodes(chosen, task.environment, problems, prompts, repeat=episodes_n,
                                           budget_tokens=config.rollout.max_new_tokens)
                times[label].append(time.perf_counter() - started)
                turns = sum(len(o) for o in episodes.outcomes)
                print(f"  {label:11s} {times[label][-1]:7.2f} s  {episodes.policy_tokens:6d} policy tokens  "
                      f"{turns:5d} turns", flush=True)
    kept, plain = statistics.median(times["kept cache"]), statistics.median(times["re-encoded"])
    print(f"{problems_n} problems x {episodes_n} episodes, median of {repeats}: kept cache {kept:.2f} s, "
          f"re-encoded {plain:.2f} s ({plain / kept:.2f}x)")
    print(f"RESULT turn_cache_speedup={plain / kept:.3f}")


if __name__ == "__main__":
    main()
