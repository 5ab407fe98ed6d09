"""SPO-chain: segments cut at low-probability tokens, valued by Monte-Carlo continuations (arXiv 2505.23564).

Segment Policy Optimization (Guo et al. 2025, github.com/AIFrameResearch/SPO) credits a response segment by
segment: it cuts the response into contiguous segments, estimates the value of the state at each segment
boundary from `K` continuations sampled there, and gives each segment the change in value across it,

    A_t = V(s_{c_{i+1}}) - V(s_{c_i})        for a token t of segment i = [c_i, c_{i+1}),    V(s_T) = R,

where `s_c` is the prompt followed by the response's first `c` tokens (`c_0 = 0`: the prompt) and `R` the
response's reward. A response's advantages sum over its segments to `R - V(s_0)`, its outcome against the
prompt's value; a single segment is GRPO's direction. With exact values, a failure's segments before its
error keep or gain value (no negative credit) and the segment holding the error carries the drop.

SPO-chain (the paper's instance for short chains of thought) partitions at *cutpoints*, the tokens
whose sampling probability is below a threshold (`p_t < 0.9`): the policy could have gone elsewhere there,
while a near-certain token changes little. A boundary is placed before every `interval`-th cutpoint (the
paper's `int5`: every fifth), so each segment holds `interval` cutpoints. Its *probability mask* trains only
the cutpoints: a token with `p_t >= 0.9` gets no advantage and leaves the loss (and the whitening statistics).

The sampler (`SpoChainSampler`), for every prompt of a step, batched across prompts:
1. Samples `group_size` responses (as GRPO does) with each token's probability (`Completions.token_probs`,
   under the temperature-scaled distribution it was drawn from).
2. Places a boundary before every `interval`-th token below `threshold` (at most `max_cutpoints` per response,
   drawn at random); a boundary before the first token is the prompt itself.
3. Estimates each boundary's value from `k` continuations (`credo.rollout.values.prefix_values`, one batched
   call per band of remaining budget with a shared prefix cache). The prompt's value is the mean reward of the
   row's `group_size - 1` siblings, i.i.d. samples from it (as the vine sampler, `credo.rollout.samplers.vine`).
It records each token's segment (`segment_ids`), the value its segment starts from (`step_values`) and whether
it is a cutpoint (`cutpoint_mask`); every continuation token counts in the rollout's tokens (`spo/tokens_base`,
`spo/tokens_values`). The estimator (`credo.credit.spo.SegmentAdvantage`) computes the value changes (as
VinePPO's steps), trains the cutpoints only and whitens them.

Paper and official code (`math_episode_generator_with_mc_advantages.py`, `ppo_trainer.py`, `trainers/utils.py`;
configs `polIter_rho1bSft2_spo_chain_GSM8K.jsonnet`, `episode_generators/interval5.jsonnet`): threshold 0.9,
every 5th cutpoint (`cutpoint_interval`, 5 in the SPO README's runs), `K = 9` continuations (`samples: 9`), 8
responses per prompt at temperature 0.6, advantages whitened over the masked tokens (`masked_whiten` with the
probability mask: token-weighted mean, unbiased variance, eps 1e-8), PPO's clipped loss as a token mean over the
trained tokens, no critic. credo's choices where they are silent or differ: the prompt's value comes from the
siblings (the code samples `K` continuations of the prompt when the first token is a cutpoint, and gives the
tokens before the first cutpoint advantage 0; they are above the threshold, so the mask drops them either way);
the cutpoints and the mask are read from the sampling probabilities, once (the code scores both with the actor
after sampling, the same distribution); `max_cutpoints` bounds the cost on long responses (None, the code's
setting: every cutpoint); the batch is whitened once before it is split (the code whitens each mini-batch).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from credo.batch import RecordedField, inside_response
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import encode_prompts, per_token
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.rows import SEGMENT_IDS, assemble, make_rows
from credo.rollout.samplers.base import Sampler, registered
from credo.rollout.samplers.vine import sibling_values
from credo.rollout.thoughts import ThoughtRules
from credo.rollout.values import STEP_VALUES, prefix_values
from credo.schema import Section
from credo.tasks import Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class SpoChainConfig(Section):
    """Options of the SPO-chain sampler (`rollout.spo_chain`): segments cut at low-probability tokens (arXiv
    2505.23564)."""

    threshold: float = Field(0.9, gt=0.0, le=1.0)
    """A token sampled with probability below this is a cutpoint (the paper's 0.9).

    Only the cutpoints are trained (the probability mask, `credit.prob_mask`)."""
    interval: int = Field(5, ge=1)
    """A segment boundary before every `interval`-th cutpoint (the paper's `int5`; 1: before every cutpoint)."""
    k: int = Field(9, ge=1)
    """Continuations sampled from each boundary to estimate its value (the paper's K = 9)."""
    max_cutpoints: int | None = Field(None, ge=1)
    """Estimate at most this many boundaries per response, drawn at random among them (None: all, the paper's)."""
    thoughts: ThoughtRules = ThoughtRules()
    """When a response's episode ends (answer, budgets), as for the vine sampler; segments ignore thoughts."""


def sample_spo_chain(backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig,
                     rng=random) -> Rollout:
    """`prompts_per_step` groups with the segments and boundary values of their responses (module docstring).
    `rng` draws the subsampled boundaries (Python's global RNG: seeded and checkpointed by the trainer)."""
    spo: SpoChainConfig = options.spo_chain
    size = options.group_size
    problems = stream.take(options.prompts_per_step)
    out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in problems]),
                           max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                           top_p=options.top_p, repeat=size)
    if out.token_probs is None:
        raise ValueError("the spo_chain sampler cuts at the sampled tokens' probabilities, which this generation "
                         "backend does not record (Completions.token_probs)")
    rows = make_rows(backend.tokenizer, task, [p for p in problems for _ in range(size)], out, spo.thoughts,
                     options.reward_errors)
    probs = [out.token_probs[n, : len(row.episode.ids)].tolist() for n, row in enumerate(rows)]
    cuts = [boundaries(p, spo.threshold, spo.interval, spo.max_cutpoints, rng) for p in probs]
    values, value_tokens = prefix_values(backend, task, [(row, [row.episode.ids[:c] for c in row_cuts])
                                                         for row, row_cuts in zip(rows, cuts)], spo.k, options,
                                         spo.thoughts)
    roots = sibling_values([r.verdict.reward for r in rows], size)
    base_tokens = sum(r.tokens for r in rows)
    groups = [rows[start : start + size] for start in range(0, len(rows), size)]
    rollout = assemble(groups, backend.tokenizer.pad_token_id, base_tokens + value_tokens)
    width = rollout.completions.response_ids.shape[1]
    layouts = [segment_layout(len(p), row_cuts, [root] + estimates)
               for p, row_cuts, root, estimates in zip(probs, cuts, roots, values)]
    low = [[q < spo.threshold for q in p] for p in probs]
    rollout.records = {"segment_ids": per_token([s for s, _ in layouts], width, -1, torch.long),
                       "step_values": per_token([v for _, v in layouts], width, 0.0, torch.float32),
                       "cutpoint_mask": per_token(low, width, False, torch.bool)}
    estimated = sum(len(c) for c in cuts)
    rollout.metrics = {
        "spo/tokens_base": float(base_tokens),
        "spo/tokens_values": float(value_tokens),
        "spo/cutpoint_share": sum(map(sum, low)) / max(1, sum(len(p) for p in probs)),
        "spo/boundaries_per_response": estimated / len(rows),
        "spo/value_mean": sum(sum(v) for v in values) / estimated if estimated else 0.0,
        "verify/sandbox_failures": sandbox_failures([r.verdict for r in rows]),
    }
    return rollout


def boundaries(probs: list[float], threshold: float, interval: int, most: int | None, rng) -> list[int]:
    """The token positions `c > 0` a segment starts at: before every `interval`-th token whose probability is
    below `threshold` (the first of them included), at most `most` of them drawn at random, in order. A boundary
    before the first token is the prompt, valued by the siblings, so it is not among them.

    >>> boundaries([0.5, 0.95, 0.3, 0.2, 0.99, 0.1], 0.9, 2, None, random)
    [3]
    >>> boundaries([0.95, 0.5, 0.3, 0.2, 0.99, 0.1], 0.9, 1, None, random)
    [1, 2, 3, 5]
    """
    cuts = [t for t in [t for t, p in enumerate(probs) if p < threshold][::interval] if t > 0]
    if most is not None and len(cuts) > most:
        return sorted(rng.sample(cuts, most))
    return cuts


def segment_layout(length: int, cuts: list[int], values: list[float]) -> tuple[list[int], list[float]]:
    """Each of `length` tokens' segment (0-based; segment `i` starts at `cuts[i - 1]`, segment 0 at the first
    token) and the value of the state its segment starts from (`values[0]` the prompt's).

    >>> segment_layout(5, [2, 4], [0.5, 0.25, 1.0])
    ([0, 0, 1, 1, 2], [0.5, 0.5, 0.25, 0.25, 1.0])
    """
    segments = [bisect.bisect_right(cuts, t) for t in range(length)]
    return segments, [values[s] for s in segments]


@registered
@dataclass(frozen=True)
class SpoChainSampler(Sampler):
    name: ClassVar[str] = "spo_chain"
    draws: ClassVar[str] = ("i.i.d. groups plus K continuations before every few low-probability tokens "
                            "(Monte-Carlo segment values, never trained on)")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "segment_ids": SEGMENT_IDS,
        "step_values": STEP_VALUES,
        "cutpoint_mask": RecordedField(
            "token", "bool", "tokens sampled with probability below rollout.spo_chain.threshold (SPO's cutpoints)",
            inside_response, lambda: torch.tensor([True, False]).repeat(4, 3)),
    }
    iid: ClassVar[bool] = False
    options: ClassVar[type[Section] | None] = SpoChainConfig
    dapo_options: ClassVar[bool] = False

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_spo_chain(backend, task, stream, options)
