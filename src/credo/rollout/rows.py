"""Sampled responses as thought-MDP rows, shared by the samplers that cut responses into thoughts (resets, vine).

A `Row` is one sampled response cut to its episode (`credo.rollout.thoughts`), verified, with the prefix it
continues (a reset's kept thoughts, a Monte-Carlo continuation's state) and the tokens generated for it.
`make_rows` turns a generation call's completions into rows, `continue_rows` samples continuations of kept
prefixes; `assemble` turns groups of rows into one `Rollout` (`credo.rollout.generate.per_token` lays per-token
values of the rows out as a padded (N, T) tensor for its records).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from credo.batch import RecordedField, thought_ids_rule
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import Completions
from credo.rollout.groups import Rollout
from credo.rollout.thoughts import Episode, ThoughtRules, episode, token_pieces
from credo.tasks import Problem, Verdict, verify_all

SEGMENT_IDS = RecordedField(
    "token", "int", "thought (or step) index of each response token, 0-based, -1 off the response",
    thought_ids_rule, lambda: torch.arange(6).div(2, rounding_mode="floor").repeat(4, 1),
)
"""`segment_ids`, recorded by the samplers that cut responses into thoughts (resets: thoughts; vine: steps); the
demo's toy responses are three thoughts of two tokens."""


@dataclass
class Row:
    """One sampled response: the episode kept, its verdict, and where it belongs."""

    problem: Problem
    prompt: list[int]
    episode: Episode
    text: str
    verdict: Verdict
    truncated: bool
    prefix_len: int = 0
    tokens: int = 0
    """Tokens generated for this row (a continuation: its own tokens, not the prefix)."""

    def first_wrong_thought(self) -> int | None:
        """The 1-based thought holding the step checker's first wrong step (a missing step: the last thought);
        None where no step is wrong or the task has no step checker."""
        wrong = self.verdict.first_wrong_step
        return None if wrong is None else min(max(1, self.episode.num_thoughts), wrong + 1)


def make_rows(tokenizer, task, problems, out: Completions, rules: ThoughtRules, on_error: str,
              prefixes: list[list[int]] | None = None) -> list[Row]:
    """Rows from generated completions: (prefix +) response cut to its episode, verified. A row's `prefix_len` is
    the part of its kept episode that the prefix holds: all of the prefix, unless the episode rules cut inside it
    (a prefix that ends inside a thought whose continuation crosses the token budget loses that thought)."""
    rows = []
    for n, (problem, generated) in enumerate(zip(problems, out.id_lists())):
        prefix = prefixes[n] if prefixes else []
        full = prefix + generated
        kept = episode(full, token_pieces(tokenizer, full), rules)
        prompt = out.prompt_ids[n][out.prompt_mask[n]].tolist()
        rows.append(Row(problem, prompt[: len(prompt) - len(prefix)], kept,
                        tokenizer.decode(kept.ids, skip_special_tokens=True), None, bool(out.truncated[n]),
                        prefix_len=min(len(prefix), len(kept.ids)), tokens=len(generated)))
    verdicts, _ = verify_all(task, [r.problem for r in rows], [r.text for r in rows], on_error,
                             [r.episode.ids for r in rows])
    for row, verdict in zip(rows, verdicts):
        row.verdict = verdict
    return rows


BUDGET_BUCKETS = 8
"""`continue_rows` makes at most this many generation calls, one per band of remaining token budget."""


def continue_rows(backend: GenerationBackend, task, starts: Sequence[tuple[Row, list[int]]], repeat: int, options,
                  rules: ThoughtRules) -> list[Row]:
    """`repeat` continuations of each `(row, prefix)` start, sampled from `row.prompt + prefix` (the prefix's KV
    cache computed once and shared by its continuations), verified as whole responses; in order, start 0's first.

    A continuation may generate what its response had left, `options.max_new_tokens - len(prefix)`, so that
    prefix + continuation keeps the responses' budget (and no token is generated, and counted, that the
    episode's budget would cut). Starts are batched by that remaining budget, rounded up into at most
    `BUDGET_BUCKETS` bands (a one-token-per-band schedule on a short budget)."""
    limit = options.max_new_tokens
    band = math.ceil(limit / BUDGET_BUCKETS)
    calls: dict[int, list[int]] = defaultdict(list)
    for index, (_, prefix) in enumerate(starts):
        calls[min(limit, band * math.ceil(max(1, limit - len(prefix)) / band))].append(index)
    out: list[list[Row]] = [[] for _ in starts]
    for budget, indices in sorted(calls.items()):
        chosen = [starts[i] for i in indices]
        completions = backend.generate([row.prompt + prefix for row, prefix in chosen], max_new_tokens=budget,
                                       temperature=options.temperature, top_p=options.top_p, repeat=repeat)
        rows = make_rows(backend.tokenizer, task, [row.problem for row, _ in chosen for _ in range(repeat)],
                         completions, rules, options.reward_errors, prefixes=[p for _, p in chosen for _ in range(repeat)])
        for slot, index in enumerate(indices):
            out[index] = rows[slot * repeat : (slot + 1) * repeat]
    return [r for rows in out for r in rows]


def assemble(groups: list[list[Row]], pad: int, tokens: int) -> Rollout:
    """One rollout of the groups' rows, in order, with a group id per group (the sampler adds its records)."""
    rows = [r for g in groups for r in g]
    completions = Completions.from_lists([r.prompt for r in rows], [r.episode.ids for r in rows],
                                         [r.text for r in rows], [r.truncated for r in rows], pad)
    return Rollout(
        problems=[r.problem for r in rows],
        completions=completions,
        verdicts=[r.verdict for r in rows],
        rewards=torch.tensor([r.verdict.reward for r in rows], dtype=torch.float32),
        group_id=torch.arange(len(groups)).repeat_interleave(torch.tensor([len(g) for g in groups])),
        generated_tokens=tokens,
    )
