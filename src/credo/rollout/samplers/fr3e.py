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

Credit (`FirstReturnAdvantage`, the paper's adaptive advantage modulation): `V(S_j)` is the mean reward of the
continuations of `S_j`, and the change of value into `S_j`

    Delta_0 = 1 - V(S_0),    Delta_j = V(S_j) - V(S_{j-1})    (j >= 1),

sharpened over one response's states (`sharpen`, the code's `sharpening_coeff` with alpha = 1.5)

    Delta_j <- sign(Delta_j) |Delta_j|^alpha / sum_i |Delta_i|^alpha,

divides the group-centred reward of every continuation `i` of `S_j`, on its tokens after the prefix:

    A_i = (r_i - mean_{S_j} r) / exp(Delta_j).

A state whose value rose over its predecessor's gets its advantages damped, one whose value fell gets them
amplified (the paper: keep exploring where the policy already improves, press where it went wrong); every sign
is the group's, only the size changes.

The paper's settings are those of the public code (`run_srpo_v6_adv.sh`, `verl/trainer/ppo/ray_trainer.py`
and `core_algos.py::compute_srpo_outcome_advantage` at commit 509da70): 4 base responses per prompt
(`first_n`), at most 1 correct and 1 failed branched from, 4 branch points (`srpo_max_block_num`), 16
continuations per state with the prompt re-rolled as `S_0` (`n`), centred rewards without std scaling
(`adv_no_use_std`), sharpening on, state groups all right or all wrong dropped and the batch refilled
(`use_dynamic_sampling`), PPO clip 0.2 / 0.3 with a token mean over the batch, no KL, no entropy bonus.

Where credo chose:
- Branch points by the sampling entropy, as the paper states; the code ranks tokens by their sampled
  log-probability (`separate_by_prob`: the lowest), a one-sample estimate of the same uncertainty. Position 0 is
  no branch point (its state is the prompt, `S_0` already); a response of at most `branches` tokens branches at
  each of its positions.
- Continuations per state: `rollout.group_size` (the code's `n`).
- `V(S_j)` is the mean reward of all of `S_j`'s continuations. The code takes the share of positive centred
  rewards among the state groups its dynamic sampling kept: the same for binary rewards on a mixed group, but a
  dropped state is skipped (the next state's Delta is taken from the one before it). Credo keeps every state
  group; one all right or all wrong has advantage 0 and counts in the token mean's normaliser
  (`rollout.dynamic_sampling` does not apply).
- Sharpening of a response whose Deltas are all 0 leaves them 0 (the code divides 0 by 0).
- `Delta_0 = 1 - V(S_0)` is the code's value change for the prompt's state, which has no predecessor: the
  prompt's continuations are damped unless the prompt is solved. With no branch point the advantages are the
  centred rewards times `exp(-1)` (sharpened) or `exp(V(S_0) - 1)`, not GRPO's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from credo.batch import RecordedField, RolloutBatch
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage
from credo.credit.resets import suffix_mask
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

SHARPEN_POWER = 1.5
"""The code's `sharpening_coeff` exponent alpha."""


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


def value_changes(rewards: Tensor, branch_id: Tensor, prefix_len: Tensor, sharpen: bool) -> Tensor:
    """(B,) the value change `Delta` into each row's state (module docstring), sharpened over its response's
    states with `sharpen`. A state is a `(branch_id, prefix_len)` pair, its value the mean reward of its rows;
    a response's states follow one another by prefix length, the first (the prompt's) against 1."""
    states, inverse = torch.unique(torch.stack([branch_id, prefix_len], dim=1), dim=0, return_inverse=True)
    count = torch.zeros(len(states), dtype=rewards.dtype, device=rewards.device).index_add_(
        0, inverse, torch.ones_like(rewards))
    values = torch.zeros_like(count).index_add_(0, inverse, rewards) / count  # (S,) sorted by branch, then prefix
    first = torch.ones(len(states), dtype=torch.bool, device=rewards.device)
    first[1:] = states[1:, 0] != states[:-1, 0]
    delta = torch.where(first, 1.0 - values, values - values.roll(1))
    if sharpen:
        power = delta.abs() ** SHARPEN_POWER
        _, response = torch.unique(states[:, 0], return_inverse=True)
        total = torch.zeros_like(power).index_add_(0, response, power)[response]
        delta = torch.where(total > 0, delta.sign() * power / total.clamp(min=torch.finfo(power.dtype).tiny), 0.0)
    return delta[inverse]


@dataclass(frozen=True, kw_only=True)
class FirstReturnAdvantage(GroupAdvantage):
    """FR3E's estimator: each state group's centred rewards divided by `exp` of the state's (sharpened) value
    change, on the tokens after the state's prefix (module docstring)."""

    reads: ClassVar[frozenset[str]] = frozenset({"prefix_len", "branch_id"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages", "loss_mask"})

    scale: str = "none"
    """The code's `adv_no_use_std`: rewards centred on their state group's mean, not scaled by its std."""
    sharpen: bool = True
    """Sharpen the value changes over a response's states (the code's `sharpen`, on in its script)."""

    def loss_mask(self, batch: RolloutBatch, trace_mask: Tensor | None, adv: Tensor) -> tuple[Tensor, Metrics]:
        return batch.loss_mask & suffix_mask(batch.response_mask, batch.prefix_len), {}

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.prefix_len is None or batch.branch_id is None:
            raise ValueError("FirstReturnAdvantage needs RolloutBatch.prefix_len and branch_id (the fr3e sampler's), "
                             "but they are None")
        credited, metrics = super().__call__(batch)
        delta = value_changes(batch.rewards, batch.branch_id, batch.prefix_len, self.sharpen)
        factor = torch.exp(-delta)  # (B,)
        metrics.update({
            "credit/fr3e_factor_mean": float(factor.mean()),
            "credit/fr3e_value_rise_share": float((delta > 0).float().mean()),
        })
        return credited.replace(advantages=credited.advantages * factor.unsqueeze(1)), metrics


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

    def check(self, options: RolloutConfig, checks_steps: bool) -> None:
        super().check(options, checks_steps)
        if options.backend == "vllm":
            raise ValueError("the fr3e sampler branches at sampling entropies, which rollout.backend = vllm does not "
                             "record (top-k log-probs only); use rollout.backend = transformers")
