"""Turn sessions (`credo.rollout.turn_cache`): episodes sampled with their KV caches kept across turns are the episodes
the stateless path samples, re-encoding each context at every turn."""

from __future__ import annotations

import itertools

import pytest
import torch

from credo.config import load_config
from credo.models import load_model
from credo.rollout.backend import TurnBackend
from credo.rollout.episodes import sample_episodes
from credo.rollout.generate import encode_prompts
from credo.rollout.transformers_backend import TransformersBackend
from credo.tasks import build_task

CONFIG = "configs/testbed/agent/grpo.yaml"


class Stateless:
    """The same backend seen as a plain `GenerationBackend`: every turn re-sends the episode's whole context."""

    def __init__(self, backend):
        self.backend, self.tokenizer = backend, backend.tokenizer

    def generate(self, prompts, **kwargs):
        return self.backend.generate(prompts, **kwargs)


@pytest.fixture(scope="module")
def agent():
    config = load_config(CONFIG, ["task.min_steps=6", "task.max_steps=6", "task.max_turns=16"])
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    task = build_task(config.task)
    problems = list(itertools.islice(task.train_problems(seed=0), 6))
    prompts = encode_prompts(tokenizer, [p.prompt for p in problems])
    return model.eval(), tokenizer, task.environment, problems, prompts


def sample(backend, agent, **kwargs):
    _, _, env, problems, prompts = agent
    return sample_episodes(backend, env, problems, prompts, **{"repeat": 2, "budget_tokens": 160, **kwargs})


@pytest.mark.parametrize("batch_size,budget", [(256, 160), (4, 160), (256, 45)])
def test_greedy_episodes_with_a_kept_cache_equal_the_stateless_ones(agent, batch_size, budget):
    model, tokenizer, *_ = agent
    backend = TransformersBackend(model, tokenizer, batch_size=batch_size)
    assert isinstance(backend, TurnBackend) and not isinstance(Stateless(backend), TurnBackend)
    cached = sample(backend, agent, greedy=True, budget_tokens=budget)
    plain = sample(Stateless(backend), agent, greedy=True, budget_tokens=budget)
    assert cached.tokens == plain.tokens and cached.turns == plain.turns and cached.rewards == plain.rewards
    assert cached.truncated == plain.truncated
    for ours, theirs in zip(cached.probs, plain.probs, strict=True):
        assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-5)
    if budget < 160:
        assert any(cached.truncated)  # some turns were cut by what their budget had left
    else:
        assert max(len(o) for o in cached.outcomes) >= 7  # long episodes: many turns through the cache


def test_sampled_turns_carry_the_probabilities_their_whole_context_gives(agent):
    # the cache's holes (turns of different lengths, padding) hide nothing an episode needs and show nothing it
    # must not see: every sampled token's recorded probability is its probability given the episode's whole
    # sequence before it, scored afresh
    model, tokenizer, *_ = agent
    backend = TransformersBackend(model, tokenizer)
    torch.manual_seed(0)
    episodes = sample(backend, agent, temperature=1.0)
    contexts, continuations, where = [], [], []
    for r, tokens in enumerate(episodes.tokens):
        for start, end in zip(episodes.turn_starts[r], episodes.turn_ends(r)):
            turn = [i for i in range(start, end) if episodes.policy[r][i]]
            contexts.append(episodes.prompts[r] + tokens[:turn[0]])
            continuations.append([tokens[i] for i in turn])
            where.append((r, turn))
    scored = backend.score(contexts, continuations)
    recorded = [[episodes.probs[r][i] for i in turn] for r, turn in where]
    assert len(where) > 40 and len({len(c) for c in continuations}) > 2  # turns of several lengths
    for fresh, kept in zip(scored, recorded, strict=True):
        assert torch.allclose(torch.tensor(fresh).exp(), torch.tensor(kept), atol=1e-5)


def test_continued_episodes_start_from_their_prefix_in_the_cache(agent):
    model, tokenizer, *_ = agent
    backend = TransformersBackend(model, tokenizer)
    first = sample(backend, agent, greedy=True)
    starts = [first.prefix(2 * i, min(3, len(first.outcomes[2 * i]) - 1)) for i in range(len(first.outcomes) // 2)]
    cached = sample(backend, agent, greedy=True, starts=starts)
    plain = sample(Stateless(backend), agent, greedy=True, starts=starts)
    assert cached.tokens == plain.tokens and cached.rewards == plain.rewards
    assert all(c[:len(s.tokens)] == s.tokens for c, s in zip(cached.tokens[::2], starts))
