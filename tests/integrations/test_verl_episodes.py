"""credo's multi-turn episodes in verl 0.9.1 (`credo.integrations.verl_episodes`): the episode agent loop on verl's
agent-loop base with a scripted rollout server, and credo's turn-level estimators through verl's own
`compute_advantage`.

(a) the loop's rows are credo's own episodes (the same tokens as `sample_round` draws with the same script), the
observation tokens outside verl's `response_mask`, the episode's reward as the row's score and each turn's reward
where the layout puts it; (b) verl's `compute_advantage` (`verl.trainer.ppo.ray_trainer`, the function verl's v1
trainer delegates a registered estimator to) with `credo_mt_grpo` gives credo's own MT-GRPO advantages on those
episodes; (c) turns and rewards read back from verl's rows equal `Episodes.token_fields`' on random ragged episodes,
and so do MT-GRPO's advantages; (d) what cannot run is refused with the reason: GiGPO (no anchor states reach verl's
estimator), a turn-level estimator without the episode loop, with an in-reward KL or the v0 trainer, an episode
verl's mask cannot show, a row without an episode start.

The calculator's episodes (turn reward 0.5 for a call that shows the chain's true value) are scripted: each
problem's G sessions take four different courses, read by the calculator's environment behind the scorer sandbox.
verl must be importable (docs/guides/verl.md); without it every test here fails, none is skipped.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
import threading
import types
from collections import Counter

import numpy as np
import pytest
import torch

try:
    import verl  # noqa: F401
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.protocol import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.workers.rollout.replica import TokenOutput
except ImportError as error:  # fail loudly: this file tests the integration, it has nothing to skip to
    pytest.fail(f"verl is not importable ({error}); install it: pip install 'credo[verl]' (docs/guides/verl.md)",
                pytrace=False)

from test_verl import compose_verl  # noqa: E402

from credo.batch import RolloutBatch  # noqa: E402
from credo.integrations import verl as cv  # noqa: E402
from credo.integrations.verl_episodes import (  # noqa: E402
    EpisodeAgentLoop,
    episode_batch,
    episode_rows,
    row_scores,
    turn_ids,
)
from credo.methods import METHODS, get_method  # noqa: E402
from credo.rollout.episodes import Episodes  # noqa: E402
from credo.rollout.generate import Completions, left_pad, per_token, right_pad  # noqa: E402
from credo.tasks.arith import ArithConfig, ArithTask, Chain  # noqa: E402
from credo.tasks.calculator import CalculatorConfig, CalculatorTask  # noqa: E402
from credo.tasks.environment import TurnOutcome  # noqa: E402
from credo.testbed import END, build_tokenizer  # noqa: E402

G = 4
BUDGET = 160  # tokens of an episode, turns and observations together (the longest scripted one has 128)
MAX_TURNS = 4
CALL_REWARD = 0.5
CHAINS = [Chain(start=12, steps=(("+", 5), ("-", 9))), Chain(start=30, steps=(("+", 1),))]  # 12 -> 17 -> 08; 30 -> 31
COURSES = {  # each problem's G episodes; their first turns differ, so an episode's history names its course
    "calc 12+5-9?": [
        ["<call>12+5</call>", "<call>17-9</call>", "\\boxed{08}"],                       # right, two turn rewards
        ["<call>12+6</call>", "<call>18-9</call>", "\\boxed{09}"],                       # a wrong call: none
        ["\\boxed{08}"],                                                                 # one turn, no observation
        ["<call>check</call>", "<call>12+5</call>", "<call>17-9</call>", "\\boxed{08}"],  # a check first
    ],
    "calc 30+1?": [
        ["<call>30+1</call>", "\\boxed{31}"],
        ["<call>30+2</call>", "\\boxed{32}"],
        ["<call>undo</call>", "<call>30+1</call>", "\\boxed{31}"],                       # an invalid undo first
        ["<call>check</call>"] * MAX_TURNS,                                              # cut at max_turns: reward 0
    ],
}
ESTIMATORS = {  # verl name: (credo method, its credit overrides)
    "credo_mt_grpo": ("mt_grpo", {}),
    "credo_test_mt_grpo_all": ("mt_grpo", {"turns": "all"}),
}


@pytest.fixture(scope="module", autouse=True)
def registered():
    names = cv.register()
    cv.register_method("credo_test_mt_grpo_all", "mt_grpo", estimator={"turns": "all"})
    return names


class Courses:
    """Each episode's scripted course: a fresh episode takes its problem's next course (G per problem, in the order
    episodes start), a running one its course's next turn (its history names the course). `overshoot` adds tokens
    after a call's `</call>`, as a server that does not stop at the stop string writes on."""

    def __init__(self, overshoot: str = ""):
        self.tokenizer, self.started, self.overshoot = build_tokenizer(), Counter(), overshoot

    def reply(self, ids: list[int]) -> list[int]:
        text = self.tokenizer.decode(ids)
        user = text.split("<|user|>")[1].split(END)[0]
        written = re.sub(r"<obs>.*?</obs>", "", text.split("<|assistant|>", 1)[1])  # the policy's turns so far
        done = written.count("</call>")
        if not written:
            course = COURSES[user][self.started[user] % G]
            self.started[user] += 1
        else:
            [course] = [c for c in COURSES[user] if "".join(c[:done]) == written]
        turn = course[done]
        text = turn + (self.overshoot if turn.endswith("</call>") else END)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class Server:
    """verl's server manager over the courses: one request, one reply (at most `max_tokens`), requests recorded."""

    def __init__(self, courses: Courses):
        self.courses, self.requests = courses, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((request_id, dict(sampling_params)))
        return TokenOutput(token_ids=self.courses.reply(list(prompt_ids))[: sampling_params["max_tokens"]])


class Backend:
    """credo's generation backend over the courses (what credo's own sampler calls)."""

    def __init__(self, courses: Courses):
        self.courses, self.tokenizer = courses, courses.tokenizer

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        assert stop == ["</call>"] and repeat == 1
        replies = [self.courses.reply(list(ids))[:max_new_tokens] for ids in prompts]
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad(prompts, pad)
        r_ids, r_mask = right_pad(replies, pad)
        return Completions(p_ids, p_mask, r_ids, r_mask, self.tokenizer.batch_decode(replies, skip_special_tokens=True),
                           torch.zeros(len(prompts), dtype=torch.bool))


def calculator():
    task = CalculatorTask(CalculatorConfig(call_reward=CALL_REWARD, max_turns=MAX_TURNS))
    return task, [task.problem(chain) for chain in CHAINS]


def trainer_config(n=G):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": 64, "response_length": BUDGET, "n": n, "temperature": 1.0, "top_p": 1.0,
        "calculate_log_probs": False}}, "data": {}, "reward": {}})


def run_sessions(rows, server, sampling=None):
    """`G` sessions of every row, all at once on one event loop as verl's agent-loop worker runs them, each on an
    agent loop built for it; returns the outputs (rows' sessions consecutive) and the loops."""
    config = trainer_config()
    tokenizer = server.courses.tokenizer

    async def session(row, uid):
        loop = EpisodeAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data))
        output = await loop.run(dict(sampling or {"temperature": 1.0, "top_p": 1.0}), raw_prompt=row["prompt"],
                                extra_info=row["extra_info"], reward_model=row["reward_model"], uid=uid)
        return output, loop

    async def main():
        return await asyncio.gather(*[session(row, f"p{i}") for i, row in enumerate(rows) for _ in range(G)])

    pairs = asyncio.run(main())
    return [o for o, _ in pairs], [loop for _, loop in pairs]


def verl_rows(outputs):
    """The padded (B, T) tensors verl's v1 trainer reads from agent-loop outputs (`as_dict`, what its agent-loop
    worker stores; padded with zeros): responses, response_mask, rm_scores."""
    rows = [o.as_dict() for o in outputs]
    pad = torch.nn.utils.rnn.pad_sequence
    return tuple(pad([r[key] for r in rows], batch_first=True) for key in ("responses", "response_mask", "rm_scores"))


def verl_compute_advantage():
    """verl's `ray_trainer.compute_advantage`. Its module imports torchdata's `StatefulDataLoader` for the trainer's
    dataloader, which `compute_advantage` does not use and the CPU install (`pip install --no-deps verl`) lacks:
    a stand-in module is put in its place only when torchdata is missing."""
    try:
        import torchdata.stateful_dataloader  # noqa: F401
    except ModuleNotFoundError:
        stub = types.ModuleType("torchdata.stateful_dataloader")
        stub.StatefulDataLoader = type("StatefulDataLoader", (), {})
        sys.modules.setdefault("torchdata", types.ModuleType("torchdata"))
        sys.modules["torchdata.stateful_dataloader"] = stub
    from verl.trainer.ppo.ray_trainer import compute_advantage

    return compute_advantage


def verl_advantages(name, scores, mask, uids, **algorithm):
    """Advantages as verl's v1 trainer computes them (`_compute_advantage`: the scores as `token_level_scores`
    and, without an in-reward KL, `token_level_rewards`; the uids as `uid`), through verl's `compute_advantage`."""
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_scores": scores,
                                        "token_level_rewards": scores}, non_tensors={"uid": uids})
    config = AlgoConfig(**algorithm)
    out = verl_compute_advantage()(data, adv_estimator=name, gamma=config.gamma, lam=config.lam, num_repeat=G,
                                   norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo, config=config)
    return out.batch["advantages"]


def credo_own(task, problems, courses):
    """The episodes of the same courses drawn by credo's own sampler, and the batch credo's trainer builds."""
    from credo.rollout.groups import sample_round
    from credo.rollout.options import RolloutOptions

    options = RolloutOptions(prompts_per_step=len(problems), group_size=G, max_new_tokens=BUDGET)
    rollout = sample_round(Backend(courses), task, problems, options)
    return rollout, rollout.batch(**rollout.checks)


def matching_rows(responses, lengths, uids, rollout):
    """For each verl row, the row of credo's rollout with the same problem and tokens (sessions start in any order)."""
    c = rollout.completions
    own = {(int(rollout.group_id[j]), tuple(c.response_ids[j][c.response_mask[j]].tolist())): j
           for j in range(len(c.texts))}
    return [own[(int(uid[1:]), tuple(responses[b, :lengths[b]].tolist()))] for b, uid in enumerate(uids)]


# ------------------------------------------------------------------ (a) the rows are credo's episodes
def test_the_episode_loop_runs_credos_episodes_through_verls_server():
    task, problems = calculator()
    rows = episode_rows(task, problems)
    server = Server(Courses(overshoot="<obs>9"))  # a server that writes on past the stop string: cut by the client
    outputs, loops = run_sessions(rows, server)
    responses, mask, scores = verl_rows(outputs)
    lengths = [len(o.response_ids) for o in outputs]
    uids = [f"p{b // G}" for b in range(len(outputs))]
    rollout, batch = credo_own(task, problems, Courses())
    match = matching_rows(responses, lengths, uids, rollout)
    assert sorted(match) == list(range(2 * G))  # every course once: the same episodes as credo's own sampler

    tokenizer = server.courses.tokenizer
    for b, (output, loop) in enumerate(zip(outputs, loops)):
        j, n, episodes = match[b], lengths[b], loop.episodes
        # observations outside response_mask: the policy's tokens are credo's loss mask, the others the observations
        assert torch.equal(mask[b, :n].bool(), batch.loss_mask[j, :n]) and mask[b, n:].sum() == 0
        observed = tokenizer.decode(responses[b, :n][mask[b, :n] == 0].tolist())
        assert observed == "".join(o.observation for o in episodes.outcomes[0])  # "" after the last turn
        assert observed.count("<obs>") == sum(not o.done for o in episodes.outcomes[0])
        # the reward is the row's score; each turn's reward sits on its first token, the reward on the last token
        reward = float(rollout.rewards[j])
        assert output.reward_score == reward == output.extra_fields["reward_extra_info"]["credo_reward"]
        starts = episodes.turn_starts[0]
        turn_rewards = [o.turn_reward or 0.0 for o in episodes.outcomes[0]]
        assert scores[b, starts].tolist() == turn_rewards == output.extra_fields["turn_scores"]
        assert scores[b, n - 1] == (reward if n - 1 not in starts else turn_rewards[-1])
        assert scores[b].sum() == pytest.approx(reward + sum(turn_rewards))
    # by hand: the first problem's right course earns both call rewards and the reward; the cut one nothing
    courses = {tuple(lp.episodes.texts[0]): b for b, lp in enumerate(loops)}
    right = courses[tuple(COURSES["calc 12+5-9?"][0])]
    assert scores[right][scores[right] != 0].tolist() == [0.5, 0.5, 1.0]
    cut = courses[tuple(COURSES["calc 30+1?"][3])]
    assert scores[cut].abs().sum() == 0 and loops[cut].episodes.truncated[0] and mask[cut, lengths[cut] - 1] == 0
    # every turn asked verl's server to stop at the turn marker; one sticky request id per episode
    assert all(p["stop"] == ["</call>"] and p["include_stop_str_in_output"] for _, p in server.requests)
    ids = [rid for rid, _ in server.requests]
    assert len(set(ids)) == 2 * G and len(ids) == sum(len(lp.episodes.outcomes[0]) for lp in loops)


def test_episode_rows_load_through_verls_dataset_and_start_the_problems_episodes(tmp_path):
    """The rows, written as the guide writes them (parquet) and read by verl's own `RLHFDataset`, give the agent loop
    the problem's prompt as verl's `raw_prompt` and the environment's start state."""
    import pandas
    from verl.utils.dataset.rl_dataset import RLHFDataset

    task, problems = calculator()
    pandas.DataFrame(episode_rows(task, problems)).to_parquet(tmp_path / "train.parquet")
    config = OmegaConf.create({"max_prompt_length": 64, "prompt_key": "prompt", "return_raw_chat": True,
                               "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})
    dataset = RLHFDataset(data_files=[str(tmp_path / "train.parquet")], tokenizer=build_tokenizer(), config=config)
    for item, problem in zip([dataset[i] for i in range(len(dataset))], problems, strict=True):
        environment, state, start = EpisodeAgentLoop.episode_start(item)
        assert item["raw_prompt"] == [{"role": "user", "content": problem.prompt}] and start.prompt == problem.prompt
        assert state == task.environment.reset(problem) and state["call_reward"] == CALL_REWARD
        assert (environment.max_turns, environment.turn_end) == (MAX_TURNS, "</call>")
    outputs, _ = run_sessions([{**dataset[0], "prompt": dataset[0]["raw_prompt"]}], Server(Courses()))
    assert sorted(o.reward_score for o in outputs) == [0, 1, 1, 1]


def test_the_registered_episode_loop_builds_as_verls_worker_builds_it():
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap, _agent_loop_registry

    assert _agent_loop_registry[cv.EPISODE_LOOP] == {"_target_": cv.EPISODE_LOOP_TARGET}
    config = trainer_config()

    async def build():  # as verl's AgentLoopWorker._run_agent_loop builds it, on its event loop
        return hydra.utils.instantiate(
            config=_agent_loop_registry[cv.EPISODE_LOOP], trainer_config=DictConfigWrap(config),
            server_manager=Server(Courses()), tokenizer=build_tokenizer(), processor=None, hf_model_type=None,
            dataset_cls=None, data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))

    loop = asyncio.run(build())
    assert isinstance(loop, EpisodeAgentLoop) and loop.response_length == BUDGET


def test_a_greedy_request_plays_the_episode_greedily():
    task, problems = calculator()
    server = Server(Courses())
    outputs, _ = run_sessions(episode_rows(task, problems[:1]), server, sampling={"temperature": 0.0, "top_p": 1.0})
    assert all(p["temperature"] == 0 and p["top_k"] == -1 for _, p in server.requests)
    assert sorted(o.reward_score for o in outputs) == [0, 1, 1, 1]


# ------------------------------------------------------------------ (b) verl's compute_advantage gives credo's
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_verls_compute_advantage_with_credos_turn_estimator_gives_credos_own_advantages(name):
    method, overrides = ESTIMATORS[name]
    task, problems = calculator()
    outputs, _ = run_sessions(episode_rows(task, problems), Server(Courses()))
    responses, mask, scores = verl_rows(outputs)
    lengths = [len(o.response_ids) for o in outputs]
    uids = np.array([f"p{b // G}" for b in range(len(outputs))], dtype=object)
    adv = verl_advantages(name, scores, mask, uids)

    rollout, batch = credo_own(task, problems, Courses())
    own, _ = get_method(method, estimator=overrides).credit(batch)
    match = matching_rows(responses, lengths, uids, rollout)
    T = max(adv.shape[1], own.advantages.shape[1])
    pad = torch.nn.functional.pad
    expected = pad(own.advantages, (0, T - own.advantages.shape[1]))[match]
    assert adv.dtype == torch.float32 and expected.abs().sum() > 0
    torch.testing.assert_close(pad(adv, (0, T - adv.shape[1])), expected, rtol=0, atol=0)
    assert (adv[mask == 0] == 0).all()  # no credit on observations
    # per-turn credit, not one advantage per row: some episode's turns get different advantages
    assert any(len(set(adv[b][mask[b] == 1].tolist())) > 1 for b in range(len(outputs)))


def test_an_outcome_estimator_on_the_episode_loop_reads_the_reward_plus_the_turn_rewards():
    task, problems = calculator()
    outputs, _ = run_sessions(episode_rows(task, problems), Server(Courses()))
    _, mask, scores = verl_rows(outputs)
    uids = np.array([f"p{b // G}" for b in range(len(outputs))], dtype=object)
    adv = verl_advantages("credo_grpo", scores, mask, uids)
    summed = torch.tensor([o.reward_score + sum(o.extra_fields["turn_scores"]) for o in outputs])
    batch = RolloutBatch(response_ids=torch.zeros(mask.shape, dtype=torch.long), response_mask=cv.response_cover(
        mask.bool()), group_id=torch.arange(len(outputs)) // G, rewards=summed, old_logp=torch.zeros(mask.shape),
        loss_mask=mask.bool())
    torch.testing.assert_close(adv, get_method("grpo").credit(batch)[0].advantages, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ (c) the layout, read back, is the episodes'
def random_episodes(g: random.Random, rows: int) -> Episodes:
    """`rows` ragged episodes: 1 to 5 turns of 1 to 4 tokens (one-token turns often), 1 to 3 observation tokens
    after each turn the environment answered, turn rewards from {none, 0, 0.5, -0.25, 0.3} and rewards on the ones
    it ended (some by their last turn, the others cut with or without an observation after it)."""
    fields = {name: [] for name in ("tokens", "policy", "turns", "probs", "entropies", "texts", "outcomes", "anchors",
                                    "turn_starts")}
    rewards, truncated = [], []
    for _ in range(rows):
        tokens, policy, turns, starts, outcomes = [], [], [], [], []
        K, done = g.randint(1, 5), g.random() < 0.7
        reward = g.choice([0.0, 1.0, 0.75, 0.1]) if done else 0.0
        for k in range(K):
            last = k == K - 1
            starts.append(len(tokens))
            n = g.choice([1, 1, 2, 3, 4])
            tokens += [7] * n
            policy += [True] * n
            turns += [k] * n
            outcomes.append(TurnOutcome("", done and last, {}, turn_reward=g.choice([None, 0.0, 0.5, -0.25, 0.3]),
                                        reward=reward if done and last else None))
            m = 0 if done and last else g.randint(1, 3) if not last else g.randint(0, 3)
            tokens += [8] * m
            policy += [False] * m
            turns += [-1] * m
        if len(tokens) == 1 and reward:  # one one-token turn cannot carry a reward apart from its turn reward
            outcomes[0] = TurnOutcome("", True, {}, turn_reward=outcomes[0].turn_reward, reward=0.0)
            reward = 0.0
        for name, value in (("tokens", tokens), ("policy", policy), ("turns", turns), ("outcomes", outcomes),
                            ("turn_starts", starts), ("probs", [0.0] * len(tokens)),
                            ("entropies", [0.0] * len(tokens)), ("texts", [""] * K), ("anchors", ["s"] * K)):
            fields[name].append(value)
        rewards.append(reward)
        truncated.append(not done)
    return Episodes(prompts=[[1]] * rows, rewards=rewards, truncated=truncated, prefix_len=[0] * rows, **fields)


@pytest.mark.parametrize("seed", range(8))
def test_turns_and_rewards_read_back_from_verls_rows_are_credos_on_random_ragged_episodes(seed):
    g = random.Random(seed)
    episodes = random_episodes(g, 24)
    B = len(episodes.tokens)
    width = max(len(t) for t in episodes.tokens) + g.randint(0, 3)  # verl pads every row to the batch's longest
    scores = per_token([row_scores(episodes, b) for b in range(B)], width, 0.0, torch.float32)
    mask = per_token(episodes.policy, width, False, torch.bool).long()  # verl's int64 mask
    index = np.array([f"u{g.randint(0, 4)}" for _ in range(B)], dtype=object)  # groups of any size, any order
    read = episode_batch(scores, mask, index)

    fields = episodes.token_fields(width)
    cover = cv.response_cover(mask.bool())
    assert torch.equal(read.thought_ids, torch.where(cover, fields["thought_ids"], -1))  # spans from transitions
    assert torch.equal(turn_ids(mask), read.thought_ids)
    assert torch.equal(read.turn_reward, torch.where(cover, fields["turn_reward"], 0.0))  # each turn's reward
    assert torch.equal(read.rewards, torch.tensor(episodes.rewards, dtype=torch.float32))  # exact, no subtraction
    assert torch.equal(read.loss_mask, fields["loss_mask"])
    # and so credo's estimator gives on verl's rows exactly what it gives on the episodes
    own = RolloutBatch(response_ids=torch.zeros(B, width, dtype=torch.long),
                       response_mask=per_token([[True] * len(t) for t in episodes.tokens], width, False, torch.bool),
                       group_id=cv.group_ids(index), rewards=torch.tensor(episodes.rewards),
                       old_logp=torch.zeros(B, width), **fields)
    for overrides in ({}, {"turns": "all"}):
        method = get_method("mt_grpo", estimator=overrides)
        assert torch.equal(method.credit(read)[0].advantages, method.credit(own)[0].advantages)


def test_an_episode_verls_mask_cannot_show_is_refused():
    episodes = random_episodes(random.Random(0), 1)
    one_turn = Episodes(prompts=[[1]], tokens=[[7]], policy=[[True]], turns=[[0]], probs=[[0.0]], entropies=[[0.0]],
                        texts=[[""]], outcomes=[[TurnOutcome("", True, {}, turn_reward=0.5, reward=1.0)]],
                        anchors=[["s"]], rewards=[1.0], truncated=[False], turn_starts=[[0]], prefix_len=[0])
    with pytest.raises(ValueError, match="one one-token turn cannot carry its reward"):
        row_scores(one_turn, 0)
    assert row_scores(Episodes(**{**vars(one_turn), "rewards": [0.0]}), 0) == [0.5]  # no reward: nothing to part
    two = TurnOutcome("<obs></obs>", False, {})
    glued = Episodes(**{**vars(one_turn), "tokens": [[7, 7]], "policy": [[True, True]], "turns": [[0, 1]],
                        "outcomes": [[two, TurnOutcome("", True, {}, reward=1.0)]], "turn_starts": [[0, 1]],
                        "texts": [["", ""]], "anchors": [["s", "t"]], "probs": [[0.0, 0.0]],
                        "entropies": [[0.0, 0.0]]})
    with pytest.raises(ValueError, match="an observation token between them"):  # an empty observation
        row_scores(glued, 0)
    empty = Episodes(**{**vars(glued), "tokens": [[7]], "policy": [[True]], "turns": [[1]], "probs": [[0.0]],
                        "entropies": [[0.0]], "turn_starts": [[0, 0]]})
    with pytest.raises(ValueError, match="every turn needs a token"):  # a turn without tokens
        row_scores(empty, 0)
    assert row_scores(episodes, 0)  # the generator's episodes are fine


def test_a_thread_waiting_on_a_stopped_event_loop_is_told_so():
    """A session's thread waits on the worker's event loop for each turn; a loop that stopped (a failed sibling's
    caller returned) never runs the request, and the thread must not wait for it for ever (nor block the exit)."""
    from credo.integrations.verl_agent import on_loop

    loop = asyncio.new_event_loop()  # never runs
    request, errors = asyncio.sleep(0), []

    def session():
        try:
            on_loop(request, loop, poll_s=0.01)
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=session, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and errors and "event loop stopped" in errors[0]
    request.close()
    loop.close()


# ------------------------------------------------------------------ (d) refusals
LOOP, ESTIMATOR = cv.AGENT_LOOP_KEY, cv.ESTIMATOR_KEY
MT_GRPO = [f"{ESTIMATOR}=credo_mt_grpo", f"{cv.LOSS_KEY}=credo_mt_grpo", f"{cv.AGG_KEY}=token-mean"]


def fails_with(message, *overrides):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        cv.validate_config(compose_verl(*overrides))
    assert "\n" not in str(error.value)


def test_turn_level_choices_are_checked_before_verl_starts():
    cv.validate_config(compose_verl(*MT_GRPO, f"{LOOP}=credo_episodes"))
    cv.validate_config(compose_verl(f"{ESTIMATOR}=grpo", f"{LOOP}=credo_episodes"))  # GRPO on episodes: allowed
    fails_with(f"{LOOP}=single_turn_agent: credo estimator 'credo_mt_grpo' reads each row's turns and turn rewards "
               f"from credo's episode agent loop; set {LOOP}=credo_episodes", *MT_GRPO)
    fails_with(f"{LOOP}=credo_srpo: credo estimator 'credo_mt_grpo' reads each row's turns",
               *MT_GRPO, f"{LOOP}=credo_srpo", "actor_rollout_ref.rollout.n=8")
    fails_with("algorithm.use_kl_in_reward=True: credo estimator 'credo_mt_grpo' reads each turn's reward",
               *MT_GRPO, f"{LOOP}=credo_episodes", "algorithm.use_kl_in_reward=True")
    fails_with("trainer.use_v1=False: credo's agent loop 'credo_episodes' lays each episode's turn rewards out",
               *MT_GRPO, f"{LOOP}=credo_episodes", "trainer.use_v1=False")
    fails_with("algorithm.norm_adv_by_std_in_grpo=False: credo estimator 'credo_mt_grpo' has no std-scaling switch",
               *MT_GRPO, f"{LOOP}=credo_episodes", "algorithm.norm_adv_by_std_in_grpo=False")
    fails_with(f"{LOOP}=credo_episodes: credo estimator 'credo_srpo' reads each row's advantage from credo's srpo "
               "agent loop", f"{ESTIMATOR}=credo_srpo", f"{LOOP}=credo_episodes")


def test_gigpo_is_refused_because_no_anchor_state_reaches_verls_estimator():
    if "gigpo" not in METHODS:
        pytest.skip("gigpo is not registered")
    assert "credo_gigpo" not in cv.verl_names() and "credo_mt_grpo" in cv.verl_names()
    why = cv.refusal(get_method("gigpo"))
    assert why.startswith("it needs turn_anchor (a task's environment: the state each turn of an episode was taken "
                          "from), which verl passes neither to the advantage estimator nor to the policy loss")
    fails_with(f"{ESTIMATOR}=credo_gigpo: credo method 'gigpo' has no verl adapter: {why}",
               f"{ESTIMATOR}=credo_gigpo", f"{LOOP}=credo_episodes")


def test_a_row_without_an_episode_start_or_a_task_without_an_environment_is_an_error():
    task, problems = calculator()
    row = episode_rows(task, problems[:1])[0]
    with pytest.raises(ValueError, match="extra_info.credo_task and extra_info.credo_state"):
        run_sessions([{**row, "extra_info": {"index": 0}}], Server(Courses()))
    with pytest.raises(ValueError, match="task 'arith' has none"):
        episode_rows(ArithTask(ArithConfig()), problems[:1])
