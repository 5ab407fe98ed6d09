"""Multi-turn episodes: the policy's turns and an environment's observations, sampled turn by turn.

`sample_episodes` runs a batch of episodes in lockstep: every running episode's next turn is generated in one call
(the environment's `turn_end` as the call's stop string), then the environment reads every new turn in one sandboxed
batch (`Environment.step_batch`) and its observations are appended as token ids, never re-tokenising what came
before. A backend that keeps episodes' KV caches across turns (`TurnBackend`: the transformers one,
`credo.rollout.turn_cache`) encodes only each turn's new tokens; any other gets each episode's context so far as the
prompt of a `generate` call. An episode ends when the environment
says so, after `max_turns` turns, or when its next turn would not fit its token budget; one that ends without the
environment's word is `truncated` and earns 0.

The sequence after the prompt holds both sides; `policy` marks the policy's tokens (the ones a loss trains on) and
`turns` gives each of them its turn's index (-1 on observation tokens), the spans turn-level credit reads. The
behaviour policy's token probabilities and entropies are kept on the policy's tokens (0 on observations).

An episode may also continue an earlier one from a turn boundary (`Episodes.prefix`, a reset's kept turns): it
starts with that episode's first turns and their observations as they stand (token ids, outcomes, the environment's
state after them) and samples on from there; the prefix's tokens are neither generated again nor counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from credo.rollout.backend import GenerationBackend, TurnBackend
from credo.rollout.generate import Completions, per_token
from credo.rollout.turn_cache import TurnSession
from credo.tasks.base import Problem, Verdict
from credo.tasks.environment import Environment, TurnOutcome

_GROWN = ("tokens", "policy", "turns", "probs", "entropies", "texts", "outcomes", "anchors", "turn_starts")
"""The lists an episode grows turn by turn (a `Prefix` holds their first turns)."""


@dataclass(frozen=True)
class Prefix:
    """An episode's first turns, which a continued episode starts from (`Episodes.prefix`): their tokens and the
    observations after them, per-token fields and per-turn records as the episode holds them, and the environment's
    state after the last of them (None where there is no turn: the continuation is a fresh episode)."""

    tokens: list[int]
    policy: list[bool]
    turns: list[int]
    probs: list[float]
    entropies: list[float]
    texts: list[str]
    outcomes: list[TurnOutcome]
    anchors: list[str]
    turn_starts: list[int]
    state: Mapping[str, Any] | None


@dataclass
class Episodes:
    """A batch of episodes, one per row (a problem's rows consecutive), as token lists."""

    prompts: list[list[int]]
    tokens: list[list[int]] = field(default_factory=list)
    """Each episode's sequence after its prompt: its turns and the observations between them."""
    policy: list[list[bool]] = field(default_factory=list)
    """Per token of `tokens`: the policy wrote it (True) or the environment did (False)."""
    turns: list[list[int]] = field(default_factory=list)
    """Per token of `tokens`: the index of the policy's turn it belongs to, -1 on observation tokens."""
    probs: list[list[float]] = field(default_factory=list)
    """Per token: its probability under the distribution it was drawn from (0 on observation tokens)."""
    entropies: list[list[float]] = field(default_factory=list)
    """Per token: that distribution's entropy (0 on observation tokens)."""
    texts: list[list[str]] = field(default_factory=list)
    """Each episode's turns as the policy wrote them (special tokens dropped), in order."""
    outcomes: list[list[TurnOutcome]] = field(default_factory=list)
    """Each episode's turns' outcomes, one per turn."""
    anchors: list[list[str]] = field(default_factory=list)
    """Each episode's turns' anchor states: the key (`Environment.anchor`) of the state each turn was taken from."""
    rewards: list[float] = field(default_factory=list)
    """Each episode's reward: the environment's on its last turn, 0 for an episode it did not end."""
    truncated: list[bool] = field(default_factory=list)
    """The episode ended at `max_turns` or its token budget, not by the environment."""
    turn_starts: list[list[int]] = field(default_factory=list)
    """Each episode's turns' first positions in `tokens` (a turn's observation ends where the next turn starts)."""
    prefix_len: list[int] = field(default_factory=list)
    """Each episode's leading tokens that it continued from an earlier episode (`Prefix`; 0: a fresh episode)."""

    @property
    def policy_tokens(self) -> int:
        """Tokens the policy generated (the rollout-token count: observations are not generated, nor the prefixes
        that continued episodes start from)."""
        return sum(self.generated(row) for row in range(len(self.tokens)))

    def generated(self, row: int) -> int:
        """The policy's tokens of episode `row` sampled here (after its prefix)."""
        return sum(self.policy[row][self.prefix_len[row]:])

    def turn_ends(self, row: int) -> list[int]:
        """Episode `row`'s turns' ends in `tokens`, each turn's observation included."""
        return self.turn_starts[row][1:] + [len(self.tokens[row])]

    def prefix(self, row: int, turns: int) -> Prefix:
        """Episode `row`'s first `turns` turns and their observations, to continue from (the next turn, the one a
        continuation samples afresh, must be one the episode took: its turns before the last)."""
        if not 0 <= turns < len(self.outcomes[row]):
            raise ValueError(f"a continued episode keeps fewer turns than episode {row} took "
                             f"({len(self.outcomes[row])}), not {turns}")
        cut = self.turn_starts[row][turns]
        return Prefix(self.tokens[row][:cut], self.policy[row][:cut], self.turns[row][:cut], self.probs[row][:cut],
                      self.entropies[row][:cut], self.texts[row][:turns], self.outcomes[row][:turns],
                      self.anchors[row][:turns], self.turn_starts[row][:turns],
                      self.outcomes[row][turns - 1].state if turns else None)

    @classmethod
    def gather(cls, picks: Sequence[tuple[Episodes, int]]) -> Episodes:
        """One batch of the picked `(episodes, row)` rows, in order (e.g. the rows of several sampling calls)."""
        return cls(**{f.name: [getattr(source, f.name)[row] for source, row in picks] for f in fields(cls)})

    def completions(self, pad: int) -> Completions:
        """The episodes as a batch's responses: each row's whole sequence after its prompt (turns and observations:
        what the policy attends to), its turns' texts joined, the behaviour statistics (0 on observations)."""
        return Completions.from_lists(self.prompts, self.tokens, ["".join(texts) for texts in self.texts],
                                      self.truncated, pad, self.probs, self.entropies)

    def verdicts(self) -> list[Verdict]:
        """Each episode's verdict: the environment's reward (correct when positive), and the per-turn checker's
        wrong turns as its wrong steps (0-based turn indices; turns that decide nothing are never wrong)."""
        out = []
        for reward, outcomes in zip(self.rewards, self.outcomes, strict=True):
            wrong = tuple(t for t, o in enumerate(outcomes) if o.correct is False)
            out.append(Verdict(reward=reward, correct=reward > 0, first_wrong_step=wrong[0] if wrong else None,
                               wrong_steps=wrong, sandbox_failed=any(o.failed for o in outcomes)))
        return out

    def token_fields(self, width: int) -> dict[str, Tensor]:
        """(B, width) per-token fields of a batch: `loss_mask` (the policy's tokens: observations get no gradient),
        `thought_ids` (each token's turn, an observation taking the turn before it, -1 off the sequence: non-
        decreasing, as the step checker's thoughts are), `thought_wrong` (the tokens of the turns the checker
        judged wrong) and `thought_judged` (of the turns it judged: not a check, which decides nothing), so that the
        per-decision oracle credits each turn by its own correctness; (B,)
        `blame_start`, the first token of each episode's first wrong turn (-1: none), for first-error blame; and
        the turn-level methods' `turn_anchor` (each token's turn's anchor state, numbered in order of first
        appearance over the batch) and `turn_reward` (the environment's reward for each token's turn, 0: none)."""
        turn_of = [list(row) for row in self.turns]
        for row in turn_of:  # an observation belongs to the turn it answers (every sequence starts with a turn)
            for i in range(1, len(row)):
                if row[i] < 0:
                    row[i] = row[i - 1]
        wrong = [[turn >= 0 and outcomes[turn].correct is False for turn in row]
                 for row, outcomes in zip(turn_of, self.outcomes, strict=True)]
        judged = [[turn >= 0 and outcomes[turn].correct is not None for turn in row]
                  for row, outcomes in zip(turn_of, self.outcomes, strict=True)]
        keys: dict[str, int] = {}
        anchor = [[keys.setdefault(anchors[turn], len(keys)) for turn in row]
                  for row, anchors in zip(turn_of, self.anchors, strict=True)]
        reward = [[outcomes[turn].turn_reward or 0.0 for turn in row]
                  for row, outcomes in zip(turn_of, self.outcomes, strict=True)]
        policy = per_token(self.policy, width, False, torch.bool)
        wrong_tokens = per_token(wrong, width, False, torch.bool) & policy
        first = [row.index(True) if True in row else -1 for row in wrong_tokens.tolist()]
        return {"loss_mask": policy, "thought_ids": per_token(turn_of, width, -1, torch.long),
                "thought_wrong": wrong_tokens, "thought_judged": per_token(judged, width, False, torch.bool) & policy,
                "blame_start": torch.tensor(first, dtype=torch.long),
                "turn_anchor": per_token(anchor, width, -1, torch.long),
                "turn_reward": per_token(reward, width, 0.0, torch.float32)}


def sample_episodes(backend: GenerationBackend, env: Environment, problems: Sequence[Problem],
                    prompts: Sequence[list[int]], *, repeat: int, budget_tokens: int, temperature: float = 1.0,
                    top_p: float = 1.0, greedy: bool = False,
                    starts: Sequence[Prefix | None] | None = None) -> Episodes:
    """`repeat` episodes per problem (`prompts[i]` is problem i's encoded prompt), each turn at most the
    environment's `turn_tokens` long and each episode's turns and observations together at most `budget_tokens`.

    With `starts`, problem i's episodes continue `starts[i]` (a `Prefix` of an earlier episode of that problem;
    None or no turn: a fresh episode): they start with its tokens, turns and state, and its turns count towards
    `max_turns` and its tokens towards the budget, as the earlier episode's did."""
    turn_tokens = env.turn_tokens
    if turn_tokens < 1 or budget_tokens < 1:
        raise ValueError(f"turn_tokens and budget_tokens must be positive, got {turn_tokens} and {budget_tokens}")
    if starts is not None and len(starts) != len(problems):
        raise ValueError(f"starts gives one prefix per problem: {len(starts)} for {len(problems)} problems")
    rows = len(problems) * repeat
    episodes = Episodes(prompts=[list(p) for p in prompts for _ in range(repeat)],
                        **{name: [[] for _ in range(rows)] for name in _GROWN},
                        rewards=[0.0] * rows, truncated=[True] * rows, prefix_len=[0] * rows)
    states: list[dict[str, Any]] = []
    for i, problem in enumerate(problems):
        start = starts[i] if starts is not None else None
        for _ in range(repeat):
            if start is None or start.state is None:
                states.append(env.reset(problem))
                continue
            r = len(states)
            for name in _GROWN:
                getattr(episodes, name)[r] = list(getattr(start, name))
            episodes.prefix_len[r] = len(start.tokens)
            states.append(dict(start.state))
    running = list(range(rows))
    session = backend.open_turns([episodes.prompts[r] + episodes.tokens[r] for r in range(0, rows, repeat)],
                                 repeat=repeat) if isinstance(backend, TurnBackend) else None
    sampling = {"temperature": temperature, "top_p": top_p, "greedy": greedy}
    while True:
        running = [r for r in running
                   if len(episodes.outcomes[r]) < env.max_turns and len(episodes.tokens[r]) < budget_tokens]
        if not running:
            break
        turns = (_next_turns(backend, episodes, running, turn_tokens, budget_tokens, env.turn_end, **sampling)
                 if session is None else
                 _session_turns(session, backend.tokenizer, episodes, running, turn_tokens, budget_tokens,
                                env.turn_end, **sampling))
        outcomes = env.step_batch([states[r] for r in running], [turns[r][3] for r in running])
        still = []
        for r, outcome in zip(running, outcomes, strict=True):
            ids, probs, entropies, text = turns[r]
            episodes.turn_starts[r].append(len(episodes.tokens[r]))
            _append(episodes, r, ids, len(episodes.outcomes[r]), probs, entropies)
            episodes.texts[r].append(text)
            episodes.outcomes[r].append(outcome)
            episodes.anchors[r].append(env.anchor(states[r]))
            states[r] = dict(outcome.state)
            if outcome.done:
                episodes.rewards[r], episodes.truncated[r] = outcome.reward or 0.0, False
                continue
            room = budget_tokens - len(episodes.tokens[r])
            observation = backend.tokenizer(outcome.observation, add_special_tokens=False)["input_ids"][:room]
            _append(episodes, r, observation, -1, [0.0] * len(observation), [0.0] * len(observation))
            if session is not None:
                session.observe(r, observation)
            still.append(r)
        running = still
    return episodes


def _next_turns(backend: GenerationBackend, episodes: Episodes, rows: list[int], turn_tokens: int, budget_tokens: int,
                stop: str, **sampling) -> dict[int, tuple[list[int], list[float], list[float], str]]:
    """Each running episode's next turn (its token ids, their probabilities and entropies, its text), each at most
    `turn_tokens` long and within what its budget has left: one generation call per distinct limit, so that an
    episode near the end of its budget never shortens another's turn."""
    by_limit: dict[int, list[int]] = {}
    for r in rows:
        by_limit.setdefault(min(turn_tokens, budget_tokens - len(episodes.tokens[r])), []).append(r)
    out = {}
    for limit, chosen in sorted(by_limit.items()):
        drawn = backend.generate([episodes.prompts[r] + episodes.tokens[r] for r in chosen], max_new_tokens=limit,
                                 stop=[stop], **sampling)
        for i, r in enumerate(chosen):
            ids = drawn.response_ids[i][drawn.response_mask[i]].tolist()
            out[r] = (ids, _row(drawn.token_probs, i, len(ids)), _row(drawn.entropies, i, len(ids)), drawn.texts[i])
    return out


def _session_turns(session: TurnSession, tokenizer, episodes: Episodes, rows: list[int], turn_tokens: int,
                   budget_tokens: int, stop: str,
                   **sampling) -> dict[int, tuple[list[int], list[float], list[float], str]]:
    """`_next_turns` through a turn session: each running episode's next turn after its cached context, all in one
    call, each row at most `turn_tokens` and what its budget has left."""
    limits = [min(turn_tokens, budget_tokens - len(episodes.tokens[r])) for r in rows]
    drawn = session.turn(rows, limits, stop=[stop], **sampling)
    texts = tokenizer.batch_decode([drawn[r][0] for r in rows], skip_special_tokens=True)
    return {r: (*drawn[r][:3], text) for r, text in zip(rows, texts, strict=True)}


def _row(values, i: int, length: int) -> list[float]:
    """Row `i`'s first `length` per-token values of a backend's (N, T) tensor, zeros where it records none."""
    return [0.0] * length if values is None else values[i, :length].tolist()


def _append(episodes: Episodes, row: int, ids: list[int], turn: int, probs: list[float],
            entropies: list[float]) -> None:
    """Tokens appended to an episode: the policy's turn `turn`, or with `turn` -1 an observation."""
    episodes.tokens[row] += ids
    episodes.policy[row] += [turn >= 0] * len(ids)
    episodes.turns[row] += [turn] * len(ids)
    episodes.probs[row] += probs
    episodes.entropies[row] += entropies
