"""Multi-turn episodes in TRL's GRPOTrainer (`credo.integrations.trl_episodes`): credo's turn-level credit through
`CredoGRPOTrainer(credo_episodes=...)`, on TRL's own `_generate_and_score_completions` and `_compute_loss`.

(a) the per-token advantages TRL's loss reads equal credo's own estimator's on the same episodes drawn by credo's
own sampler (`sample_round`, the batch credo's trainer builds); (b) observation tokens get no loss weight (TRL's
`tool_mask`, credo's loss mask, and a zero gradient of the loss on their log-probs); (c) a training run with the
policy's own generation turn by turn changes the weights; (d) a turn-level method without the episode path, and
settings the episode path cannot honour, are errors that say why.

The calculator's episodes are scripted (`EpisodeScript`: each problem's draws take four different courses) and
read by the calculator's environment behind the scorer sandbox, with a turn reward for every call that shows the
chain's true value."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch

pytest.importorskip("trl")

import test_trl  # noqa: E402

from credo.methods import METHODS, get_method  # noqa: E402
from credo.rollout.generate import Completions, left_pad, right_pad  # noqa: E402
from credo.tasks.arith import Chain  # noqa: E402
from credo.tasks.calculator import CalculatorConfig, CalculatorTask  # noqa: E402
from credo.testbed import END  # noqa: E402

grpo_config = test_trl.grpo_config
model_and_tokenizer, tiny_model_config = test_trl.model_and_tokenizer, test_trl.tiny_model_config  # the fixtures

G = 4
BUDGET = 112  # tokens of an episode, turns and observations together (the longest scripted one has 95)
CALL_REWARD = 0.5
CHAINS = [Chain(start=12, steps=(("+", 5), ("-", 9))), Chain(start=30, steps=(("+", 1),))]  # 12 -> 17 -> 08; 30 -> 31
COURSES = {  # each problem's G draws, in order; their first turns differ, so a history names its course
    "calc 12+5-9?": [
        ["<call>12+5</call>", "<call>17-9</call>", "\\boxed{08}"],                       # right, two turn rewards
        ["<call>12+6</call>", "<call>18-9</call>", "\\boxed{09}"],                       # wrong call: no turn reward
        ["\\boxed{08}"],                                                                 # one turn: no observation
        ["<call>check</call>", "<call>12+5</call>", "<call>17-9</call>", "\\boxed{08}"],  # a check first
    ],
    "calc 30+1?": [
        ["<call>30+1</call>", "\\boxed{31}"],
        ["<call>30+2</call>", "\\boxed{32}"],
        ["<call>undo</call>", "<call>30+1</call>", "\\boxed{31}"],                       # an invalid undo first
        ["\\boxed{30}"],
    ],
}
TURN_METHODS = {  # name: (registered method, its credit overrides)
    "mt_grpo": ("mt_grpo", {}),
    "mt_grpo turns=all": ("mt_grpo", {"turns": "all"}),
    "gigpo": ("gigpo", {}),
    "grpo": ("grpo", {}),  # a row-level method on episodes: one advantage on every policy token of a row
}


class EpisodeScript:
    """A generation backend that plays each episode's scripted course: a fresh episode takes its problem's next
    course (G per problem, in order), a running one its course's next turn (its history names the course)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.started = tokenizer, Counter()

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        assert stop == ["</call>"] and repeat == 1
        replies = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            user = text.split("<|user|>")[1].split(END)[0]
            written = re.sub(r"<obs>.*?</obs>", "", text.split("<|assistant|>", 1)[1])  # the policy's turns so far
            done = written.count("</call>")
            if done == 0:
                course = COURSES[user][self.started[user] % G]
                self.started[user] += 1
            else:
                [course] = [c for c in COURSES[user] if "".join(c[:done]) == written]
            reply = course[done]
            replies.append(self.tokenizer(reply + ("" if reply.endswith("</call>") else END),
                                          add_special_tokens=False)["input_ids"][:max_new_tokens])
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad(prompts, pad)
        r_ids, r_mask = right_pad(replies, pad)
        probs = torch.where(r_mask, 0.5, 0.0)
        return Completions(p_ids, p_mask, r_ids, r_mask, self.tokenizer.batch_decode(replies, skip_special_tokens=True),
                           torch.zeros(len(prompts), dtype=torch.bool), token_probs=probs, entropies=probs * 2)


def calculator(**config):
    task = CalculatorTask(CalculatorConfig(call_reward=CALL_REWARD, **config))
    return task, [task.problem(chain) for chain in CHAINS]


def episode_trainer(model, tokenizer, tmp_path, name, overrides=None, **settings):
    from credo.integrations.trl import CredoGRPOTrainer
    from credo.integrations.trl_episodes import TaskEpisodes

    task, problems = calculator()
    episodes = TaskEpisodes(task, backend=EpisodeScript(tokenizer))
    dataset = episodes.dataset(problems)
    args = grpo_config(tmp_path, max_completion_length=BUDGET, **settings)
    trainer = CredoGRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                               credo_method=name, credo_overrides={"credit": overrides or {}}, credo_episodes=episodes)
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer.train
    return trainer, task, problems


def score(trainer):
    """One generation batch, each problem's G rows consecutive, through the trainer's own
    `_generate_and_score_completions` (training mode)."""
    trainer.model.train()
    dataset = trainer.train_dataset
    return trainer._generate_and_score_completions([dict(dataset[i]) for i in range(len(dataset)) for _ in range(G)])


def credo_own(task, problems, tokenizer):
    """The same episodes through credo's own sampler and the batch credo's trainer builds from them (`sample_round`,
    `Rollout.batch` with the episodes' fields, `credo.train.behaviour_batch`)."""
    from credo.rollout.groups import sample_round
    from credo.rollout.options import RolloutOptions

    options = RolloutOptions(prompts_per_step=len(problems), group_size=G, max_new_tokens=BUDGET)
    rollout = sample_round(EpisodeScript(tokenizer), task, problems, options)
    return rollout, rollout.batch(**rollout.checks)


# ------------------------------------------------------------------ (a) the advantages are credo's estimator's
@pytest.mark.parametrize("case", list(TURN_METHODS))
def test_the_advantages_trls_loss_reads_are_credos_estimators_on_the_same_episodes(case, model_and_tokenizer,
                                                                                    tmp_path):
    name, overrides = TURN_METHODS[case]
    if name not in METHODS:
        pytest.skip(f"{name} is not registered")
    model, tokenizer = model_and_tokenizer
    trainer, task, problems = episode_trainer(model, tokenizer, tmp_path, name, overrides)
    output = score(trainer)
    rollout, batch = credo_own(task, problems, tokenizer)

    # the same episodes: tokens, rewards (TRL's reward machinery: the environment's, one per episode), turn fields
    ids, mask = rollout.completions.response_ids, rollout.completions.response_mask
    assert output["completion_ids"].shape == ids.shape
    assert torch.equal(output["completion_mask"].bool(), mask)
    assert torch.equal(torch.where(mask, output["completion_ids"], 0), torch.where(mask, ids, 0))
    assert output["credo_rewards"].tolist() == rollout.rewards.tolist() == [1, 0, 1, 1, 1, 0, 1, 0]
    turns = batch.thought_ids.amax(dim=1) + 1
    assert turns.tolist() == [3, 3, 1, 4, 2, 2, 3, 1]  # turn counts vary within each group
    assert batch.turn_reward.amax(dim=1).tolist() == [CALL_REWARD, 0, 0, CALL_REWARD, CALL_REWARD, 0, CALL_REWARD, 0]

    method = get_method(name, estimator=overrides)
    credited, _ = method.credit(batch)
    assert credited.advantages.abs().max() > 0.1
    torch.testing.assert_close(output["advantages"], credited.advantages.float(), rtol=1e-6, atol=1e-7)
    if name != "grpo":  # turn credit: the turns of one episode get different advantages
        values_per_row = [len(set(a[m].tolist())) for a, m in zip(credited.advantages, credited.loss_mask)]
        assert max(values_per_row) > 1
    assert trainer._metrics["train"]["credo/episodes/truncated_frac"] == [0.0]


# -------------------------------------------------------------------------- (b) observations get no loss weight
def test_observation_tokens_get_no_loss_weight(model_and_tokenizer, tmp_path, monkeypatch):
    model, tokenizer = model_and_tokenizer
    trainer, task, problems = episode_trainer(model, tokenizer, tmp_path, "mt_grpo")
    output = score(trainer)
    rollout, batch = credo_own(task, problems, tokenizer)
    policy = batch.loss_mask  # the policy's tokens (credo's own episodes)
    response = output["completion_mask"].bool()
    observed = response & ~policy
    assert int(observed.sum()) > 20 and int((response & policy).sum()) > 20

    # TRL's own mask (env_mask -> tool_mask), credo's loss mask and advantages: 0 on every observation token
    assert torch.equal(output["tool_mask"].bool() & response, policy)
    assert torch.equal(output["credo_loss_mask"], policy)
    assert (output["advantages"][observed] == 0).all()
    for row in range(response.shape[0]):  # what is masked is the environment's text, every bit of it
        text = tokenizer.decode(output["completion_ids"][row][observed[row]].tolist())
        assert re.fullmatch(r"(<obs>[^<]*</obs>)*", text), text
        assert text.count("<obs>") == int(batch.thought_ids[row].amax()), text  # one per turn but the last

    # the loss's gradient on each token's log-prob: 0 on every observation token, not on the policy's
    leaves = {}
    original = type(trainer)._get_per_token_logps_and_entropies

    def leaf_logps(self, *args, **kwargs):
        logps, entropies, aux = original(self, *args, **kwargs)
        leaves["logp"] = logps.detach().requires_grad_()
        return leaves["logp"], entropies, aux

    monkeypatch.setattr(type(trainer), "_get_per_token_logps_and_entropies", leaf_logps)
    trainer._compute_loss(trainer.model, output).backward()
    grad = leaves["logp"].grad
    assert (grad[observed] == 0).all()
    moved = (grad != 0) & policy
    assert int(moved.sum()) > 0.6 * int(policy.sum())  # every token of a row with an advantage (some rows have 0)
    assert torch.equal(moved, policy & (output["advantages"] != 0))


def test_observations_that_would_reach_the_loss_are_an_error(model_and_tokenizer, tmp_path, monkeypatch):
    """Were TRL to drop the episodes' `env_mask` (here: a rollout without one), the observation tokens would be
    trained: the trainer stops instead."""
    from credo.integrations import trl_episodes

    model, tokenizer = model_and_tokenizer
    trainer, _, _ = episode_trainer(model, tokenizer, tmp_path, "mt_grpo")
    original = trl_episodes.rollout_output
    monkeypatch.setattr(trl_episodes, "rollout_output",
                        lambda episodes: {k: v for k, v in original(episodes).items() if k != "env_mask"})
    with pytest.raises(RuntimeError, match="kept no env_mask as its tool_mask of rollout_func's output"):
        score(trainer)


# ------------------------------------------------------------------ (c) real generation, a real training step
def varied_reward(completions, **_):
    """Rewards that vary within groups on an untrained model (which never solves a chain)."""
    return [float(len(c[-1]["content"]) % 3) for c in completions]


@pytest.mark.parametrize("name", ["mt_grpo", "gigpo"])
def test_trains_on_the_policys_own_episodes_and_changes_the_weights(name, model_and_tokenizer, tmp_path):
    """The policy generates each turn itself (credo's TransformersBackend on TRL's unwrapped model), the calculator
    answers it behind the sandbox, TRL trains on the policy's tokens."""
    if name not in METHODS:
        pytest.skip(f"{name} is not registered")
    from credo.integrations.trl import CredoGRPOTrainer
    from credo.integrations.trl_episodes import TaskEpisodes

    model, tokenizer = model_and_tokenizer
    task, problems = calculator(max_turns=2, turn_tokens=8)
    episodes = TaskEpisodes(task)
    args = grpo_config(tmp_path, gradient_accumulation_steps=1, max_steps=2, learning_rate=1e-2,
                       max_completion_length=40, logging_strategy="steps", logging_steps=1)
    trainer = CredoGRPOTrainer(model=model, reward_funcs=[episodes, varied_reward], args=args,
                               train_dataset=episodes.dataset(problems), processing_class=tokenizer,
                               credo_method=name, credo_episodes=episodes)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    moved = sum(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before))
    assert moved > 1e-4

    first = trainer.state.log_history[0]
    assert first["credo/credit/adv_abs_mean"] > 0 and first["credo/credit/turns_mean"] > 1
    assert "rewards/credo_calculator/mean" in first and first["credo/episodes/failed_frac"] == 0
    sampled = episodes.last  # the untrained policy's turns: each read as invalid and answered "<obs>?</obs>" (the
    # last one too: the environment did not end the episode, the turn limit did)
    assert all(len(o) == 2 for o in sampled.outcomes) and sampled.truncated == [True] * len(sampled.outcomes)
    policy_tokens = [sum(p) for p in sampled.policy]
    assert all(len(t) > n for t, n in zip(sampled.tokens, policy_tokens))
    assert first["completions/mean_length"] <= 16  # TRL counts the policy's tokens only (two turns of 8 at most)
    for tokens, policy in zip(sampled.tokens, sampled.policy):
        assert tokenizer.decode([t for t, mine in zip(tokens, policy) if not mine]) == "<obs>?</obs>" * 2


# ---------------------------------------------------------------------------------------- (d) clear errors
def test_a_turn_level_method_without_episodes_is_refused_with_its_reason(tmp_path):
    from credo.integrations.trl import CredoGRPOTrainer, refusal, supported_methods

    turn_level = [n for n in ("mt_grpo", "gigpo") if n in METHODS]
    for name in turn_level:
        why = refusal(METHODS.get(name))
        assert why.startswith("it credits the turns of multi-turn episodes (") and "credo_episodes=TaskEpisodes" in why
        assert refusal(METHODS.get(name), episodes=True) is None
        with pytest.raises(ValueError, match=re.escape(f"does not fit TRL's GRPOTrainer: {why}")):
            CredoGRPOTrainer(model="no-model", reward_funcs=[varied_reward], args=grpo_config(tmp_path),
                             credo_method=name)  # before any model is loaded: "no-model" is never read
    assert set(turn_level) <= set(supported_methods(episodes=True)) - set(supported_methods())
    assert set(supported_methods()) <= set(supported_methods(episodes=True))
    assert "step checker" in refusal(METHODS.get("oracle_blame"), episodes=True)  # turns, not a step checker
    assert "i.i.d. groups only" in refusal(METHODS.get("srpo"), episodes=True)


def test_settings_the_episode_path_cannot_honour_are_errors(tmp_path):
    from credo.integrations.trl import CredoGRPOTrainer
    from credo.integrations.trl_episodes import TaskEpisodes
    from credo.tasks import ArithTask

    task, problems = calculator()
    episodes = TaskEpisodes(task)
    with pytest.raises(ValueError, match="mask_truncated_completions = True: .* does not honour it"):
        CredoGRPOTrainer(model="no-model", args=grpo_config(tmp_path, mask_truncated_completions=True),
                         credo_method="mt_grpo", credo_episodes=episodes)
    with pytest.raises(ValueError, match="through TRL's rollout_func; remove rollout_func"):
        CredoGRPOTrainer(model="no-model", args=grpo_config(tmp_path), credo_method="mt_grpo",
                         credo_episodes=episodes, rollout_func=lambda prompts, trainer: {})
    with pytest.raises(ValueError, match="task 'arith' has no environment"):
        TaskEpisodes(ArithTask())
    with pytest.raises(ValueError, match="scores the episodes of CredoGRPOTrainer"):
        episodes(["a completion"])
