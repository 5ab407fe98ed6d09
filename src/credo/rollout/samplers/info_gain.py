"""IGPO's sampler: the group sampler's episodes, each turn scored by how much it raised the policy's belief in the
gold answer (arXiv 2510.14967, "Information Gain-based Policy Optimization"; github.com/GuoqingWang1/IGPO,
`scrl/llm_agent/generation.py`; docs/methods.md sec. 15).

An episode of `K` turns, turn `k` starting at position `s_k` of its sequence (`s_0 = 0`: the prompt alone), has
before each turn the value of its state, the policy's (teacher-forced) belief in the gold answer `a` there:

    v_k = mean_j log pi(a_j | q, o_{<s_k}, lead, a_{<j})       (value = "log_prob": the released train.sh's
                                                                 `log_prob_diff`)
    v_k = exp(that mean)                                       (value = "prob": the paper's pi(a | q, o_{<=t}), the
                                                                 code's `prob_diff`: the gold tokens' geometric-mean
                                                                 probability)

where `lead` and `a` are the environment's answer turn (`Environment.gold_answer`: `\\boxed{` and the chain's
answer on the calculator). Turn `k`'s information gain is what it and its observation added,

    IG_k = v_{k+1} - v_k        for k < K - 1,

and the last turn gets none (the episode's reward sits there: `credo.credit.igpo`). As in the code, the policy is
the one sampling (its weights at rollout time, no gradient), and every turn has a value, the turns the environment
found invalid too (the code scores only turns ending in a valid tool call; here an invalid turn's observation is
feedback like any other). The scoring passes generate no token, so they are not rollout tokens;
`rollout/info_gain_scored` counts the states scored, `K` per episode of `K >= 2` turns (none for one turn).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from torch import Tensor

from credo.batch import RecordedField
from credo.credit.turns import turn_starts
from credo.rollout.backend import GenerationBackend, ScoringBackend
from credo.rollout.groups import ProblemStream, Rollout, sample_groups
from credo.rollout.samplers.base import Sampler, registered
from credo.schema import Section
from credo.tasks import Task

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


class InfoGainConfig(Section):
    """Options of IGPO's information-gain sampler (`rollout.info_gain`)."""

    value: Literal["prob", "log_prob"] = "prob"
    """A state's value: "prob" (the paper's) or "log_prob" (the released train.sh's).

    "prob": the gold answer's geometric-mean token probability (the code's `prob_diff`); "log_prob": its mean token
    log-probability (`log_prob_diff`)."""


def state_values(logprobs: list[list[float]], value: str) -> list[float]:
    """Each scored state's value from its gold tokens' log-probs: their mean (`log_prob`) or its exp (`prob`)."""
    means = [sum(row) / len(row) for row in logprobs]
    return means if value == "log_prob" else [math.exp(m) for m in means]


def information_gain(backend: ScoringBackend, rollout: Rollout, gold: list[tuple[list[int], list[int]]],
                     value: str) -> tuple[Tensor, int]:
    """(B, T) each token's turn's information gain (0 on a row's last turn and off the response), and the number of
    states scored. `gold[i]` is row `i`'s answer turn as token ids: its lead and its scored answer."""
    c = rollout.completions
    thoughts = rollout.checks["thought_ids"]
    rows, positions = turn_starts(thoughts, c.response_mask).nonzero(as_tuple=True)
    starts: dict[int, list[int]] = {}
    for row, position in zip(rows.tolist(), positions.tolist(), strict=True):
        starts.setdefault(row, []).append(position)
    scored = {row: row_starts for row, row_starts in starts.items() if len(row_starts) >= 2}  # one turn: no gain
    contexts, answers = [], []
    for row, row_starts in scored.items():
        prompt = c.prompt_ids[row][c.prompt_mask[row]].tolist()
        response = c.response_ids[row].tolist()
        lead, answer = gold[row]
        contexts += [prompt + response[:start] + lead for start in row_starts]  # the states before each turn
        answers += [answer] * len(row_starts)
    gains = torch.zeros(thoughts.shape, dtype=torch.float32)
    if not contexts:
        return gains, 0
    values = state_values(backend.score(contexts, answers), value)
    at = 0
    for row, row_starts in scored.items():  # v_0 .. v_{K-1}: IG_k = v_{k+1} - v_k, none on the last turn
        v = values[at:at + len(row_starts)]
        at += len(row_starts)
        per_turn = torch.tensor([v[k + 1] - v[k] for k in range(len(row_starts) - 1)] + [0.0])
        turn = thoughts[row].clamp(min=0, max=len(row_starts) - 1)
        gains[row] = torch.where(c.response_mask[row], per_turn[turn], 0.0)
    return gains, len(contexts)


def _toy_gains() -> Tensor:
    """The demo's information gain (three turns of two tokens a row, none on the last): the successes' turns raise
    the gold answer's probability, the failures' wrong turns (row 1's turn 1, row 3's turn 2) lower it or add
    little."""
    per_turn = torch.tensor([[0.2, 0.3, 0.0], [0.1, -0.2, 0.0], [0.1, 0.4, 0.0], [0.2, 0.1, 0.0]])
    return per_turn.repeat_interleave(2, dim=1)


@registered
@dataclass(frozen=True)
class InfoGainSampler(Sampler):
    name: ClassVar[str] = "info_gain"
    draws: ClassVar[str] = "i.i.d. groups of episodes, each turn's information gain scored by the policy"
    records: ClassVar[dict[str, RecordedField]] = {
        "info_gain": RecordedField(
            "token", "float", "the information gain of the token's turn: the rise in the policy's belief in the gold "
            "answer across the turn and its observation (0 on an episode's last turn)",
            lambda gain, response: (gain.ne(0) & ~response, "must be 0 off the response"),
            _toy_gains),
    }
    options: ClassVar[type[Section] | None] = InfoGainConfig
    episodes: ClassVar[bool] = True
    needs_environment: ClassVar[bool] = True

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        self.check(options, task.checks_steps, task.environment is not None)
        environment = task.environment
        if not isinstance(backend, ScoringBackend):
            raise ValueError(f"IGPO's information gain scores the gold answer under the policy, and the "
                             f"{type(backend).__name__} generation backend does not score text (use the transformers "
                             "backend)")
        rollout = sample_groups(backend, task, stream, options)
        gold = []
        for problem in rollout.problems:
            answer = environment.gold_answer(problem)
            if answer is None:
                raise ValueError(f"IGPO's information gain needs the gold answer turn of the task's environment, and "
                                 f"{type(environment).__name__}.gold_answer gives none for {problem.prompt!r}")
            lead, scored = (backend.tokenizer(text, add_special_tokens=False)["input_ids"]
                            for text in (answer.lead, answer.answer))
            if not scored:
                raise ValueError(f"the gold answer of {problem.prompt!r} encodes to no token: nothing to score")
            gold.append((lead, scored))
        gains, scored = information_gain(backend, rollout, gold, options.info_gain.value)
        rollout.records["info_gain"] = gains
        rollout.metrics["rollout/info_gain_scored"] = scored
        return rollout
