"""FR3E: first return, entropy-eliciting explore (arXiv 2507.07017; github.com/Zheng0428/FR3E; docs/methods.md sec. 12).

FR3E trains on partial rollouts branched from the uncertain tokens of a prompt's own responses. For every prompt
of a step, batched across prompts:
1. First return: draw `base` responses (`rollout.fr3e.base`), each token with the entropy of the distribution it
   was sampled from (the behaviour policy's, `Completions.entropies`); keep at most `keep` correct and `keep`
   failed ones, in draw order.
2. Branch points: a kept response `y` is cut at its `branches` highest-entropy positions `t_1 < ... < t_m`
   (`t >= 1`, the earliest on ties). Its states are `S_0` = the prompt and `S_j` = prompt + `y_{<t_j}`: each
   ends just before an uncertain token, which its continuations sample afresh.
3. Entropy-eliciting explore: `rollout.group_size` continuations of every state, one KV cache per state, within
   the responses' token budget (`credo.rollout.rows.continue_rows`). These continuations are the rows trained:
   each state's rows are one group, trained only after the state's prefix (`prefix_len`); rows continuing one
   kept response share its `branch_id`. The base responses are never trained on; every token they and the
   continuations generated counts in the rollout's cost (`fr3e/tokens_base`, `fr3e/tokens_branches`).

Credit: each state group's centred rewards scaled by the change of value into the state (the paper's adaptive
advantage modulation, `credo.credit.fr3e`), from the fields recorded here, `prefix_len` and `branch_id`.

The paper's settings are those of the public code (`run_srpo_v6_adv.sh`, `verl/trainer/ppo/ray_trainer.py`
and `core_algos.py::compute_srpo_outcome_advantage` at commit 509da70): 4 base responses per prompt
(`first_n`), at most 1 correct and 1 failed branched from, 4 branch points (`srpo_max_block_num`), 16
continuations per state with the prompt re-rolled as `S_0` (`n`), centred rewards without std scaling
(`adv_no_use_std`), sharpening on, state groups all right or all wrong dropped and the batch refilled
(`use_dynamic_sampling`), PPO clip 0.2 / 0.3 with a token mean over the batch, no KL, no entropy bonus.

Where credo chose in sampling (its choices in the credit: `credo.credit.fr3e`):
- Branch points by the sampling entropy, as the paper states; the code ranks tokens by their sampled
  log-probability (`separate_by_prob`: the lowest), a one-sample estimate of the same uncertainty. Position 0 is
  no branch point (its state is the prompt, `S_0` already); a response of at most `branches` tokens branches at
  each of its positions.
- Continuations per state: `rollout.group_size` (the code's `n`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.batch import RecordedField
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import encode_prompts
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.rows import Row, assemble, continue_rows, make_rows
from credo.rollout.samplers.base import Sampler, registered
from credo.rollout.samplers.resets import ResetSampler
from credo.rollout.thoughts import ThoughtRules
from credo.schema import Section
from credo.tasks import Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class FR3EConfig(Section):
    """Options of the FR3E sampler (`rollout.fr3e`): partial rollouts from high-entropy tokens (arXiv 2507.07017)."""

    base: int = Field(4, ge=1)
    """Responses drawn per prompt for the first return (the code's `first_n` = 4); never trained on."""
    keep: int = Field(1, ge=1)
    """Most correct and most failed base responses per prompt branched from (the code's 1 and 1), in draw order."""
    branches: int = Field(4, ge=1)
    """Branch points per kept response: its highest-entropy tokens (the code's `srpo_max_block_num` = 4).

    Each kept response costs `branches + 1` states (the prompt among them) of `rollout.group_size` continuations."""
    thoughts: ThoughtRules = ThoughtRules()
    """When a response's episode ends (its answer, its token budget), as for the vine sampler.

    FR3E cuts responses at tokens, not at thoughts."""


def sample_fr3e(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
    """`prompts_per_step` prompts' continuation groups, one per state of each kept response (module docstring)."""
    fr3e: FR3EConfig = options.fr3e
    size = options.group_size
    problems = stream.take(options.prompts_per_step)
    out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in problems]),
                           max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                           top_p=options.top_p, repeat=fr3e.base)
    if out.entropies is None:
        raise ValueError("the fr3e sampler branches at the sampling entropies of its base responses, which this "
                         "generation backend does not record (rollout.backend = transformers does)")
    rows = make_rows(backend.tokenizer, task, [p for p in problems for _ in range(fr3e.base)], out, fr3e.thoughts,
                     options.reward_errors)
    kept = kept_rows(rows, fr3e.base, fr3e.keep)
    points = [branch_points(out.entropies[n, : len(rows[n].episode.ids)].tolist(), fr3e.branches) for n in kept]
    starts = [(rows[n], rows[n].episode.ids[:t]) for n, cuts in zip(kept, points) for t in [0, *cuts]]
    continuations = continue_rows(backend, task, starts, size, options, fr3e.thoughts)
    groups = [continuations[start : start + size] for start in range(0, len(continuations), size)]
    base_tokens = sum(r.tokens for r in rows)
    branch_tokens = sum(r.tokens for r in continuations)
    rollout = assemble(groups, backend.tokenizer.pad_token_id, base_tokens + branch_tokens)
    branch_of = [b for b, cuts in enumerate(points) for _ in range((len(cuts) + 1) * size)]
    rollout.records = {"prefix_len": torch.tensor([r.prefix_len for r in continuations], dtype=torch.long),
                       "branch_id": torch.tensor(branch_of, dtype=torch.long)}
    chosen = [float(out.entropies[n, t]) for n, cuts in zip(kept, points) for t in cuts]
    every = [float(h) for n in kept for h in out.entropies[n, 1 : len(rows[n].episode.ids)]]
    rollout.metrics = {
        "fr3e/tokens_base": float(base_tokens),
        "fr3e/tokens_branches": float(branch_tokens),
        "fr3e/kept_per_prompt": len(kept) / len(problems),
        "fr3e/states_per_response": len(starts) / len(kept),
        "fr3e/branch_entropy_mean": sum(chosen) / len(chosen) if chosen else 0.0,
        "fr3e/entropy_mean": sum(every) / len(every) if every else 0.0,
        "verify/sandbox_failures": sandbox_failures([r.verdict for r in rows + continuations]),
    }
    return rollout


def kept_rows(rows: list[Row], base: int, keep: int) -> list[int]:
    """The indices of the rows branched from: per prompt (`base` consecutive rows), its first `keep` correct and
    first `keep` failed rows, in order."""
    kept = []
    for start in range(0, len(rows), base):
        taken = {True: 0, False: 0}
        for n in range(start, start + base):
            correct = rows[n].verdict.correct
            if taken[correct] < keep:
                taken[correct] += 1
                kept.append(n)
    return kept


def branch_points(entropies: list[float], branches: int) -> list[int]:
    """The positions `t >= 1` of the `branches` highest `entropies` (the earliest on ties), in order.

    >>> branch_points([9.0, 0.1, 0.7, 0.3, 0.7], 2)
    [2, 4]
    """
    candidates = sorted(range(1, len(entropies)), key=lambda t: (-entropies[t], t))
    return sorted(candidates[:branches])


@registered
@dataclass(frozen=True)
class FR3ESampler(Sampler):
    name: ClassVar[str] = "fr3e"
    draws: ClassVar[str] = ("partial rollouts: a group of continuations from the prompt and from before each of the "
                            "highest-entropy tokens of a prompt's kept responses (those never trained on)")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "prefix_len": dataclasses.replace(
            ResetSampler.records["prefix_len"],
            example=lambda: torch.tensor([0, 0, 2, 2])),  # the demo: two rows from the prompt, two after 2 tokens
        "branch_id": RecordedField(
            "row", "int", "the kept base response whose states a continuation starts from (shared by its states' rows)",
            lambda b, response: (b < 0, "must be >= 0"), lambda: torch.zeros(4, dtype=torch.long)),
    }
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = FR3EConfig
    dapo_options: ClassVar[bool] = False

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_fr3e(backend, task, stream, options)

    def check(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        super().check(options, checks_steps, multi_turn)
        if options.backend == "vllm":
            raise ValueError("the fr3e sampler branches at sampling entropies, which rollout.backend = vllm does not "
                             "record (top-k log-probs only); use rollout.backend = transformers")
