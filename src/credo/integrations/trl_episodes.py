"""Multi-turn episodes in TRL's `GRPOTrainer`: credo's turn-level credit (MT-GRPO, GiGPO) in `CredoGRPOTrainer`.

`TaskEpisodes(task)` is a credo task's environment (`credo.tasks.environment`) as TRL's rollout. Passed to
`CredoGRPOTrainer(credo_episodes=...)`, it samples each generation batch as credo's own trainer does,
`credo.rollout.episodes.sample_episodes`: turn by turn from the trainer's policy, each turn read by the environment
behind credo's scorer sandbox (`Environment.step_batch`, the only code that parses model output) and answered with
an observation that the policy attends to but is never trained on. It hands TRL, through `rollout_func`:

- `prompt_ids`, `completion_ids` (each episode's turns and observations, one sequence) and `logprobs` (the sampling
  distribution's, on the policy's tokens, 0 on observations): the keys TRL requires of a rollout function;
- `env_mask`: 1 on the policy's tokens, 0 on observation tokens. TRL (1.7 to 1.16: `GRPOTrainer._generate` pops
  it as its `tool_mask`) keeps observation tokens out of its loss mask and its completion-length metrics;
  `CredoGRPOTrainer` keeps them out of credo's loss mask, its traces and its advantages;
- `credo_episode_reward` (each episode's reward, the environment's on its last turn, 0 for an episode it did not
  end) and `credo_turns` (each token's turn, turn rewards, wrong turns and each turn's anchor state): extra fields,
  which TRL merges into each row of the generation batch before it scores it. `TaskEpisodes` is also the TRL reward
  function that reads `credo_episode_reward` (one reward per episode, through TRL's reward machinery: weighted,
  logged as `rewards/credo_<task>/mean`, summed with any other reward function), and `CredoGRPOTrainer` reads
  `credo_turns` into the `RolloutBatch` fields turn-level estimators read (`thought_ids`, `turn_reward`,
  `turn_anchor`, with `thought_wrong` beside `thought_ids`), so that the estimator gives (B, T) advantages.

Why `rollout_func` and not TRL's `environment_factory`. `rollout_func` is the TRL hook that hands a whole rollout
(token ids, log-probs, the mask of what the model did not write, per-row extras) to the trainer, with the same
contract from TRL 1.7 (the lowest version the adapter supports) to 1.16; `environment_factory` came later (it is
absent from 1.7) and makes an environment a set of tools: TRL generates until the end token, parses tool calls out
of the text with the chat template's tool-call parser in the trainer's process, calls the environment's methods
with the arguments the model wrote, and gives one reward per rollout (`get_reward`). That route reads model output
outside credo's scorer sandbox, needs a tool-calling chat template (credo's tasks end a turn at their own marker,
`Environment.turn_end`), and has no channel for per-turn rewards or the states turns were taken from, which the
turn-level estimators read. The environment's reward and its turn rewards come from one place here, the
environment the rollout used.

    from trl import GRPOConfig
    from credo.integrations.trl import CredoGRPOTrainer
    from credo.integrations.trl_episodes import TaskEpisodes
    from credo.tasks.calculator import CalculatorConfig, CalculatorTask

    task = CalculatorTask(CalculatorConfig(call_reward=0.5))   # a task with an environment, here with turn rewards
    episodes = TaskEpisodes(task)
    trainer = CredoGRPOTrainer(
        model=model, processing_class=tokenizer, args=GRPOConfig(output_dir="out", max_completion_length=256),
        train_dataset=episodes.dataset(itertools.islice(task.train_problems(seed=0), 64)),
        credo_method="mt_grpo", credo_episodes=episodes,    # reward_funcs default to [episodes]
    )
    trainer.train()

Generation runs on the trainer's own model (inside TRL's `unwrap_model_for_generation`) through credo's
`TransformersBackend` at `GRPOConfig.temperature` and `top_p`; each episode's turns and observations together fit
`max_completion_length`, each turn the environment's `turn_tokens`. Prompts are encoded as credo's trainer encodes
them (`credo.rollout.generate.encode_prompts`: the model's chat template with the generation prompt).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from credo.integrations.trl import TaskReward
from credo.rollout.backend import GenerationBackend
from credo.rollout.episodes import Episodes, sample_episodes
from credo.rollout.generate import encode_prompts, per_token
from credo.rollout.transformers_backend import TransformersBackend
from credo.tasks.base import Task

EPISODE_ARGS = {
    "use_vllm": "TaskEpisodes(task, backend=...) for another engine that samples from the policy",
    "use_transformers_paged": "nothing: the episodes are sampled by credo's backend",
    "use_transformers_continuous_batching": "nothing: the episodes are sampled by credo's backend",
    "mask_truncated_completions": "nothing: an episode the environment did not end already earns 0",
    "top_k": "nothing: credo's backend samples at temperature and top_p",
    "min_p": "nothing: credo's backend samples at temperature and top_p",
    "repetition_penalty": "nothing: credo's backend samples at temperature and top_p",
    "generation_kwargs": "nothing: credo's backend samples at temperature and top_p",
}
"""GRPOConfig fields the episode path does not honour: a value other than TRL's default is an error naming what to
use instead. `mask_truncated_completions` reads an episode as cut when its last token is no end token, which an
episode whose last turn ends at the environment's marker is not."""

TURN_KEYS = ("thought_ids", "turn_reward", "thought_wrong")
"""The per-token lists of a row's `credo_turns` (see `Episodes.token_fields`), besides its per-turn `anchors`."""


class TaskEpisodes(TaskReward):
    """A credo task's environment as TRL's rollout, and the environment's episode reward as a TRL reward function.

    Args:
        task: a task with an environment (`task.environment`, e.g. `credo.tasks.calculator.CalculatorTask`).
        backend: the generation backend the episodes are sampled with (`credo.rollout.backend.GenerationBackend`);
            None (the default): the trainer's own policy through credo's `TransformersBackend`. One given here must
            sample from the policy being trained (a scripted stand-in in tests).

    `dataset(problems)` gives TRL's dataset (`TaskReward.dataset`: a `prompt` and a `credo_problem` column); the
    episode of each row is the environment's on that row's problem. Called as a reward function, it returns each
    episode's reward (`credo_episode_reward`, the extra field `rollout` returns).
    """

    def __init__(self, task: Task, *, backend: GenerationBackend | None = None) -> None:
        if task.environment is None:
            raise ValueError(f"TaskEpisodes: task {task.name!r} has no environment (a single-turn task); use "
                             "TaskReward for its verifier as a reward function")
        super().__init__(task)
        self.environment = task.environment
        self.backend = backend
        self.last: Episodes | None = None
        """The episodes of the latest rollout on this process (their turns, outcomes and texts, for inspection)."""

    def __call__(self, completions: list, credo_episode_reward: list[float] | None = None, **_: Any) -> list[float]:
        if credo_episode_reward is None:
            raise ValueError(f"{self.__name__}: no credo_episode_reward in the batch; this reward function scores the "
                             "episodes of CredoGRPOTrainer(credo_episodes=...) only")
        return [float(r) for r in credo_episode_reward]

    def rollout(self, rows: Sequence[Mapping[str, Any]], trainer: Any) -> dict[str, list]:
        """One episode per row of the generation batch (`rows`, as the dataloader gave them to TRL, each with its
        `credo_problem`), sampled from the trainer's policy: TRL's rollout output (see the module docstring)."""
        problems = [self._problems[row["credo_problem"]] for row in rows]
        args = trainer.args
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        prompts = encode_prompts(tokenizer, [p.prompt for p in problems])
        with self._sampler(trainer, tokenizer) as backend:
            episodes = sample_episodes(backend, self.environment, problems, prompts, repeat=1,
                                       budget_tokens=args.max_completion_length, temperature=args.temperature,
                                       top_p=args.top_p)
        self.last = episodes
        return rollout_output(episodes)

    @contextmanager
    def _sampler(self, trainer: Any, tokenizer: Any) -> Iterator[GenerationBackend]:
        if self.backend is not None:
            yield self.backend
            return
        from trl.models.utils import unwrap_model_for_generation

        gather = getattr(trainer.args, "ds3_gather_for_generation", True)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=gather) as model, torch.no_grad():
            # no CUDA graphs: under ZeRO-3 the gathered weights they would capture are freed after this block
            yield TransformersBackend(model, tokenizer, cuda_graphs=False)


def rollout_output(episodes: Episodes) -> dict[str, list]:
    """Episodes as TRL's rollout output: the keys it requires, `env_mask`, and the extra fields `credo_episode_reward`
    and `credo_turns` (one dict per row: the per-token `TURN_KEYS` of `Episodes.token_fields`, an observation taking
    the turn it answers, and `anchors`, each turn's anchor state, `Environment.anchor`; with `truncated`, the
    episode ended without the environment's word, and `failed`, a sandboxed step failed)."""
    width = max((len(row) for row in episodes.tokens), default=0)
    fields = episodes.token_fields(width)
    lengths = [len(row) for row in episodes.tokens]
    turns = [
        {**{key: fields[key][i, :n].tolist() for key in TURN_KEYS}, "anchors": list(episodes.anchors[i]),
         "truncated": bool(episodes.truncated[i]), "failed": any(o.failed for o in episodes.outcomes[i])}
        for i, n in enumerate(lengths)
    ]
    recorded = all(p > 0 for probs, policy in zip(episodes.probs, episodes.policy, strict=True)
                   for p, mine in zip(probs, policy, strict=True) if mine)
    logprobs = ([[math.log(p) if mine else 0.0 for p, mine in zip(probs, policy, strict=True)]
                 for probs, policy in zip(episodes.probs, episodes.policy, strict=True)] if recorded else None)
    return {
        "prompt_ids": [list(p) for p in episodes.prompts],
        "completion_ids": [list(t) for t in episodes.tokens],
        "logprobs": logprobs,  # None where the backend records no probabilities
        "env_mask": [[int(mine) for mine in policy] for policy in episodes.policy],
        "credo_episode_reward": [float(r) for r in episodes.rewards],
        "credo_turns": turns,
    }


def turn_tensors(turns: Sequence[Mapping[str, Any]], width: int) -> dict[str, Tensor]:
    """(B, width) `thought_ids` (-1 after each row), `turn_reward` and `thought_wrong` of the rows' `credo_turns`,
    and (B,) `truncated` and `failed`."""
    return {
        "thought_ids": per_token([t["thought_ids"] for t in turns], width, -1, torch.long),
        "turn_reward": per_token([t["turn_reward"] for t in turns], width, 0.0, torch.float32),
        "thought_wrong": per_token([t["thought_wrong"] for t in turns], width, False, torch.bool),
        "truncated": torch.tensor([t["truncated"] for t in turns], dtype=torch.bool),
        "failed": torch.tensor([t["failed"] for t in turns], dtype=torch.bool),
    }


def anchor_ids(anchors: Sequence[Sequence[str]], thought_ids: Tensor) -> Tensor:
    """(B, T) each token's turn's anchor state as a number (equal keys, equal numbers; numbered in order of first
    appearance over the rows, as `Episodes.token_fields` numbers them), -1 where `thought_ids` is -1.

    Args:
        anchors: each row's turns' anchor keys, in turn order (every process's rows, so that numbers agree).
        thought_ids: (B, T) int64, each token's turn, -1 off the episode.
    """
    keys: dict[str, int] = {}
    table = [[keys.setdefault(key, len(keys)) for key in row] for row in anchors]
    width = max((len(row) for row in table), default=0) or 1
    by_turn = per_token(table, width, -1, torch.long).to(thought_ids.device)  # (B, K)
    found = by_turn.gather(1, thought_ids.clamp(min=0, max=width - 1))
    return torch.where(thought_ids >= 0, found, -1)


__all__ = ["EPISODE_ARGS", "TURN_KEYS", "TaskEpisodes", "anchor_ids", "rollout_output", "turn_tensors"]
