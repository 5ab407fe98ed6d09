"""The i.i.d. group sampler: `group_size` responses per prompt, verified by the task.

Also DAPO's options: dynamic sampling (drop groups whose rewards are all equal, refill with new prompts)
and the soft overlong penalty. Every generated token is counted in `generated_tokens`, the dropped ones
too, so methods are compared at equal cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.rollout.backend import GenerationBackend
from credo.rollout.episodes import sample_episodes
from credo.rollout.generate import Completions, encode_prompts, per_token
from credo.rollout.options import RolloutOptions
from credo.tasks import Problem, Task, Verdict, sandbox_failures, unscored_count, verify_all


class ProblemStream:
    """The task's seeded training stream with a position, so a resumed run continues where it stopped."""

    def __init__(self, task: Task, seed: int, position: int = 0) -> None:
        self.position = position
        self._problems: Iterator[Problem] = task.train_problems(seed, start=position)

    def take(self, n: int) -> list[Problem]:
        self.position += n
        return [next(self._problems) for _ in range(n)]


@dataclass
class Rollout:
    """Verified responses, one row per response, grouped by prompt."""

    problems: list[Problem]
    completions: Completions
    verdicts: list[Verdict]
    rewards: Tensor  # (N,) float
    group_id: Tensor  # (N,) int
    generated_tokens: int
    metrics: dict[str, float] = field(default_factory=dict)
    records: dict[str, Tensor] = field(default_factory=dict)
    """What the sampler recorded besides the responses, under `RolloutBatch` field names (the reset
    sampler's `prefix_len` and `segment_ids`, the revision sampler's `revision_success` and `edit_mask`)."""
    checks: dict[str, Tensor] = field(default_factory=dict)
    """Batch fields the draw fixed itself where the trainer would otherwise read them from the responses' text:
    a multi-turn episode's `loss_mask` (the policy's tokens) and its turns as the step checker's `thought_ids`,
    `thought_wrong` and `blame_start` (`credo.rollout.episodes.Episodes.token_fields`); empty for single turns."""

    def batch(self, *, old_logp: Tensor | None = None, entropy: Tensor | None = None, ref_logp: Tensor | None = None,
              device: torch.device | str | None = None, **checks: Tensor) -> RolloutBatch:
        """The rollout as the `RolloutBatch` that credit estimators and losses read, on `device`: the
        responses, prompts, rewards, verdicts and the sampler's records, with the behaviour policy's
        `old_logp` (None: zeros, for a caller that fills them later) and `entropy`, the reference policy's
        `ref_logp` and the step checker's fields (`checks`: `blame_start`, `thought_ids`, `thought_wrong`), where
        the caller has them. The one conversion from sampler output to a batch."""
        c = self.completions
        fields = {
            "response_ids": c.response_ids, "response_mask": c.response_mask, "group_id": self.group_id,
            "rewards": self.rewards, "correct": torch.tensor([v.correct for v in self.verdicts]),
            "prompt_ids": c.prompt_ids, "prompt_mask": c.prompt_mask,
            "old_logp": old_logp if old_logp is not None else torch.zeros(c.response_ids.shape),
            "entropy": entropy, "ref_logp": ref_logp, **checks, **self.records,
        }
        moved = {k: v.to(device) if device is not None else v for k, v in fields.items() if v is not None}
        mask = moved["response_mask"]
        for key in ("old_logp", "entropy", "ref_logp"):  # policy values are zero off the response
            if key in moved:
                moved[key] = torch.where(mask, moved[key], 0.0)
        return RolloutBatch(**moved)


def overlong_penalty(lengths: Tensor, max_new_tokens: int, buffer: int) -> Tensor:
    """DAPO's soft penalty: 0 up to `max - buffer` tokens, then falling linearly to -1 at `max`."""
    return -((lengths - (max_new_tokens - buffer)).clamp(min=0) / buffer).clamp(max=1.0)


@dataclass
class Drawn:
    """Verified responses to some prompts: single responses, or multi-turn episodes where the task has an
    environment."""

    completions: Completions
    verdicts: list[Verdict]
    errors: int
    """Responses scored 0 because verifying them failed (`verify_all`; an episode's failed environment steps)."""
    tokens: int
    """Tokens the policy generated (an episode's observations are not)."""
    checks: dict[str, Tensor]
    """The fields `Rollout.checks` describes (empty for single responses)."""


def draw(backend: GenerationBackend, task: Task, problems: list[Problem], prompts: list[list[int]], *, repeat: int,
         max_new_tokens: int, on_error: str, temperature: float = 1.0, top_p: float = 1.0,
         greedy: bool = False) -> Drawn:
    """`repeat` verified responses per prompt (rows in prompt order): each generated whole and verified by the
    task, or, where the task has an environment, an episode of at most `max_new_tokens` tokens, turns and
    observations together, which the environment answers and scores (`credo.rollout.episodes`)."""
    if task.environment is not None:
        episodes = sample_episodes(backend, task.environment, problems, prompts, repeat=repeat,
                                   budget_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy)
        completions = episodes.completions(backend.tokenizer.pad_token_id)
        verdicts = episodes.verdicts()
        return Drawn(completions, verdicts, sum(v.sandbox_failed for v in verdicts), episodes.policy_tokens,
                     episodes.token_fields(completions.response_ids.shape[1]))
    completions = backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                   greedy=greedy, repeat=repeat)
    rows = [p for p in problems for _ in range(repeat)]
    verdicts, errors = verify_all(task, rows, completions.texts, on_error, completions.id_lists())
    return Drawn(completions, verdicts, errors, completions.tokens, {})


def sample_round(backend: GenerationBackend, task: Task, problems: list[Problem], config: RolloutOptions) -> Rollout:
    """One round: `group_size` samples for each problem, verified."""
    rows = [p for p in problems for _ in range(config.group_size)]
    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    drawn = draw(backend, task, problems, prompts, repeat=config.group_size, max_new_tokens=config.max_new_tokens,
                 on_error=config.reward_errors, temperature=config.temperature, top_p=config.top_p)
    completions, verdicts, errors = drawn.completions, drawn.verdicts, drawn.errors
    rewards = torch.tensor([v.reward for v in verdicts], dtype=torch.float32)
    if config.overlong_buffer is not None:
        lengths = completions.response_mask.sum(dim=1)
        rewards = rewards + overlong_penalty(lengths, config.max_new_tokens, config.overlong_buffer)
    group_id = torch.arange(len(problems)).repeat_interleave(config.group_size)
    metrics = {"rollout/reward_errors": errors, "verify/sandbox_failures": sandbox_failures(verdicts),
               "verify/unscored": unscored_count(verdicts)}
    return Rollout(rows, completions, verdicts, rewards, group_id, drawn.tokens, metrics, checks=drawn.checks)


def sample_groups(backend: GenerationBackend, task: Task, stream: ProblemStream, config: RolloutOptions) -> Rollout:
    """`prompts_per_step` verified groups; with dynamic sampling, groups with equal rewards are replaced
    by groups of fresh prompts (at most `max_refills` extra rounds; any shortfall is filled with the
    dropped groups, which carry no gradient)."""
    rollout = sample_round(backend, task, stream.take(config.prompts_per_step), config)
    if not config.dynamic_sampling:
        return rollout
    rounds = [rollout]
    kept, dropped = _split_constant(rollout, config.group_size)
    refills = 0
    while len(kept) < config.prompts_per_step and refills < config.max_refills:
        extra = sample_round(backend, task, stream.take(config.prompts_per_step - len(kept)), config)
        rounds.append(extra)
        more_kept, more_dropped = _split_constant(extra, config.group_size)
        kept += more_kept
        dropped += more_dropped
        refills += 1
    chosen = (kept + dropped)[: config.prompts_per_step]
    merged = _merge(chosen, config.group_size, backend.tokenizer.pad_token_id)
    merged.generated_tokens = sum(r.generated_tokens for r in rounds)
    merged.metrics = {
        "rollout/reward_errors": sum(r.metrics["rollout/reward_errors"] for r in rounds),
        "verify/sandbox_failures": sum(r.metrics["verify/sandbox_failures"] for r in rounds),
        "verify/unscored": sum(r.metrics["verify/unscored"] for r in rounds),
        "rollout/refills": refills,
        "rollout/kept_group_share": min(len(kept), config.prompts_per_step) / config.prompts_per_step,
    }
    return merged


Group = tuple[Rollout, int]
"""A group as (its rollout, its first row)."""


def _split_constant(rollout: Rollout, size: int) -> tuple[list[Group], list[Group]]:
    kept, dropped = [], []
    for start in range(0, len(rollout.problems), size):
        rewards = rollout.rewards[start : start + size]
        (dropped if bool((rewards == rewards[0]).all()) else kept).append((rollout, start))
    return kept, dropped


def _merge(groups: list[Group], size: int, pad: int) -> Rollout:
    """One rollout of the chosen groups, with fresh group ids and re-padded tensors (their `checks` too: a
    per-token field padded with -1 where it holds indices, else with False or 0)."""
    problems, verdicts, prompts, responses, texts, truncated, rewards = [], [], [], [], [], [], []
    checks: dict[str, list] = {name: [] for name in groups[0][0].checks} if groups else {}
    for rollout, start in groups:
        c = rollout.completions
        for row in range(start, start + size):
            problems.append(rollout.problems[row])
            verdicts.append(rollout.verdicts[row])
            prompts.append(c.prompt_ids[row][c.prompt_mask[row]].tolist())
            responses.append(c.response_ids[row][c.response_mask[row]].tolist())
            texts.append(c.texts[row])
            truncated.append(bool(c.truncated[row]))
            rewards.append(float(rollout.rewards[row]))
            for name, values in checks.items():
                value = rollout.checks[name][row]
                values.append(value[: len(responses[-1])].tolist() if value.dim() else value.item())
    completions = Completions.from_lists(prompts, responses, texts, truncated, pad)
    width = completions.response_ids.shape[1]
    kinds = {name: groups[0][0].checks[name] for name in checks}
    merged = {name: per_token(values, width, -1 if kinds[name].dtype == torch.long else 0, kinds[name].dtype)
              if kinds[name].dim() == 2 else torch.tensor(values, dtype=kinds[name].dtype)
              for name, values in checks.items()}
    group_id = torch.arange(len(groups)).repeat_interleave(size)
    return Rollout(problems, completions, verdicts, torch.tensor(rewards), group_id, completions.tokens,
                   checks=merged)

