"""credo.integrations.trl: CredoGRPOTrainer trains, its loss is credo's, its TRL conventions reproduce TRL's own
GRPOTrainer (advantages, losses and gradients through TRL's code path), unfit methods and a missing TRL are clear
errors.

The comparisons script TRL's generation (`_generate_single_turn` returns fixed completions) and its rewards, then
run both trainers' own `_generate_and_score_completions` and `_compute_loss` on the same model."""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path

import pytest
import torch

from credo.config import load_config
from credo.extras import MissingExtra
from credo.hf_compat import no_checkpointing
from credo.methods import get_method

EXAMPLE = Path(__file__).parents[2] / "examples" / "trl_s_trace.yaml"
PROMPTS = ["2+3", "4+1"]  # the same length: no left padding
G = 4  # num_generations
EOS = 4  # the testbed's <|end|>
COMPLETIONS = [
    [7, 8, 9, 4], [12, 13, 14, 15, 16, 17], [8, 4], [9, 9, 9, 4],  # row 1 truncated (6 tokens, no end token)
    [10, 10, 4], [11, 12, 13, 14, 15, 16], [17, 4], [18, 19, 20, 21, 4],  # row 5 truncated
]
REWARDS = [1.0, 0.0, 0.0, 1.0, 0.2, None, 0.9, 0.4]  # None: no reward function scored row 5 (TRL: NaN)


@pytest.fixture(scope="module")
def tiny_model_config():
    from tiny import TINY_TESTBED

    return load_config(None, [f"model.testbed={TINY_TESTBED}"]).model


@pytest.fixture
def model_and_tokenizer(tiny_model_config):
    pytest.importorskip("trl")
    from credo.models import load_model

    torch.manual_seed(0)
    return load_model(tiny_model_config, torch.device("cpu"))


def grpo_config(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, seed=0, **no_checkpointing(),
        per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2,
        num_generations=G, max_completion_length=6, report_to="none", save_strategy="no",
        logging_strategy="no", disable_tqdm=True,
    )
    return GRPOConfig(**(settings | overrides))


def scripted_reward(completions, **_):
    return list(REWARDS)


def scripted_trainer(cls, model, tokenizer, args, **credo):
    """A trainer whose generation returns COMPLETIONS and whose reward is REWARDS, in the order of the rows."""
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in PROMPTS]})
    trainer = cls(model=model, reward_funcs=[scripted_reward], args=args, train_dataset=dataset,
                  processing_class=tokenizer, **credo)
    trainer._generate_single_turn = lambda *a, **k: ([list(c) for c in COMPLETIONS], None)
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer.train
    return trainer


def score(trainer):
    """One generation batch through the trainer's own `_generate_and_score_completions` (training mode)."""
    trainer.model.train()
    return trainer._generate_and_score_completions([{"prompt": [{"role": "user", "content": p}]}
                                                    for p in PROMPTS for _ in range(G)])


def off_policy(trainer, output, scale=0.3):
    """`old_per_token_logps` = current log-probs + seeded noise on the completion tokens, so ratios leave 1."""
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    width = output["completion_ids"].shape[1]
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, width)
    noise = torch.randn(logp.shape, generator=torch.Generator().manual_seed(1)) * scale
    return logp + noise * output["completion_mask"]


def micro_batch_losses(trainer, output):
    """Loss and flattened gradient of each of the 2 micro-batches of one optimiser step (TRL's split)."""
    from trl.trainer.utils import split_tensor_dict

    results = []
    for micro in split_tensor_dict(output, 2):
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, micro)
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results.append((loss.detach(), grad))
    return results


# ---------------------------------------------------------------------------------------- (c) TRL's conventions
CASES = {
    # credo method: (TRL's GRPOConfig settings for the same algorithm, settings both get)
    "grpo": ({"loss_type": "grpo"}, {"mask_truncated_completions": True}),
    "dapo": ({"loss_type": "dapo", "epsilon_high": 0.28}, {}),
    "dr_grpo": ({"loss_type": "dr_grpo", "scale_rewards": "none"}, {}),
    "gspo": ({"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}, {}),
    "grpo+kl": ({"loss_type": "grpo"}, {"beta": 0.04, "use_bias_correction_kl": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_trl_conventions_reproduce_trl_advantages_losses_and_gradients(case, model_and_tokenizer, tmp_path):
    from trl import GRPOTrainer

    from credo.integrations.trl import CredoGRPOTrainer

    model, tokenizer = model_and_tokenizer
    trl_only, shared = CASES[case]
    theirs = scripted_trainer(GRPOTrainer, model, tokenizer, grpo_config(tmp_path, **trl_only, **shared))
    ours = scripted_trainer(CredoGRPOTrainer, model, tokenizer, grpo_config(tmp_path, **shared),
                            credo_method=case.split("+")[0], credo_conventions="trl")
    out_theirs, out_ours = score(theirs), score(ours)

    # advantages: TRL's (B,) on every trained token; the unscorable row 5 is 0 and out of its group's statistics
    trl_adv = out_theirs["advantages"]
    assert trl_adv[5] == 0 and trl_adv.abs().min() < trl_adv.abs().max()
    torch.testing.assert_close(out_ours["advantages"], trl_adv.unsqueeze(1) * out_ours["credo_loss_mask"],
                               rtol=1e-6, atol=1e-6)
    masked_rows = (~out_ours["credo_loss_mask"].any(dim=1)).nonzero().flatten().tolist()
    assert masked_rows == ([1, 5] if shared.get("mask_truncated_completions") else [])

    old = off_policy(ours, out_ours)
    out_theirs["old_per_token_logps"], out_ours["old_per_token_logps"] = old, old.clone()
    if "beta" in shared:  # the reference is the starting model, so pi = pi_ref, where k3 and its gradient are 0:
        ref = moved_reference(out_ours)  # move it, so that the KL term is compared too
        out_theirs["ref_per_token_logps"], out_ours["ref_per_token_logps"] = ref, ref.clone()
    for (loss_theirs, grad_theirs), (loss_ours, grad_ours) in zip(micro_batch_losses(theirs, out_theirs),
                                                                  micro_batch_losses(ours, out_ours)):
        assert abs(float(loss_theirs)) > 1e-4  # a real loss, not 0 = 0
        torch.testing.assert_close(loss_ours, loss_theirs, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-4, atol=1e-7)
    clipped = ours._metrics["train"]["credo/clip/low_frac"] + ours._metrics["train"]["credo/clip/high_frac"]
    assert max(clipped) > 0  # the noise moved some ratios out of the clip range: clipping was compared too
    if "beta" in shared:  # credo's kl/ref is TRL's kl: the masked mean of k3 over each micro-batch's tokens
        kl_ours, kl_theirs = ours._metrics["train"]["credo/kl/ref"], theirs._metrics["train"]["kl"]
        assert len(kl_ours) == 2 and min(kl_ours) > 1e-3
        assert kl_ours == pytest.approx(kl_theirs, rel=1e-5)


def moved_reference(output, scale=0.3):
    """`ref_per_token_logps` moved by seeded noise on the completion tokens, so that pi != pi_ref."""
    noise = torch.randn(output["completion_ids"].shape, generator=torch.Generator().manual_seed(2)) * scale
    return output["ref_per_token_logps"] + noise * output["completion_mask"]


# ------------------------------------------------------------------------------ (b) credo's own loss, exactly
@pytest.mark.parametrize("name", ["s_trace", "grpo_lambda"])
def test_micro_batch_losses_add_up_to_credos_loss_on_the_generation_batch(name, model_and_tokenizer, tmp_path):
    from credo.batch import RolloutBatch
    from credo.integrations.trl import CredoGRPOTrainer

    model, tokenizer = model_and_tokenizer
    overrides = {"loss": {"decay" if name == "s_trace" else "lam": 0.9}}
    ours = scripted_trainer(CredoGRPOTrainer, model, tokenizer, grpo_config(tmp_path, mask_truncated_completions=True),
                            credo_method=name, credo_overrides=overrides)
    output = score(ours)
    old = off_policy(ours, output)
    output["old_per_token_logps"] = old

    # credo on its own: the same rows, log-probs and entropies from a plain forward pass of the model
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    T = output["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
                   ).logits[:, -T - 1:-1]  # (B, T, V): the positions that predict the completion tokens
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    logp = logprobs.gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)  # (B, T)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    response_mask = output["completion_mask"].bool()
    rewards = torch.tensor([0.0 if r is None else r for r in REWARDS])
    batch = RolloutBatch(
        response_ids=output["completion_ids"], response_mask=response_mask,
        group_id=torch.arange(len(REWARDS)) // G, rewards=rewards, old_logp=old,
        entropy=torch.where(response_mask, entropy, 0.0),
    )
    method = get_method(name, loss=overrides["loss"])
    scorable = torch.tensor([r is not None for r in REWARDS])
    keep = scorable.nonzero().flatten()
    credited, _ = method.credit(batch.select(keep))  # TRL leaves unscorable rows out of the statistics
    advantages = torch.zeros(batch.response_mask.shape).index_copy(0, keep, credited.advantages)
    full = batch.replace(advantages=advantages, trace_mask=None if credited.trace_mask is None else
                         response_mask.index_copy(0, keep, credited.trace_mask))
    torch.testing.assert_close(output["advantages"], full.advantages, rtol=1e-6, atol=1e-7)
    if name == "s_trace":
        assert torch.equal(output["credo_trace_mask"], full.trace_mask)
        assert 0 < int(full.trace_mask.sum()) < int(response_mask.sum())

    model.zero_grad()
    expected = method.policy_loss(logp, full)
    expected.loss.backward()
    expected_grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    parts = micro_batch_losses(ours, output)
    assert abs(float(expected.loss.detach())) > 1e-4
    torch.testing.assert_close(parts[0][0] + parts[1][0], expected.loss.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts[0][1] + parts[1][1], expected_grad, rtol=1e-4, atol=1e-6)
    assert expected.metrics["trace/weight_mean"] != 1.0  # the traces carried history: the test can tell


# --------------------------------------------------------------------------------------- (a) real training
def varied_reward(completions, **_):
    """Rewards that vary within groups on an untrained model (the tiny testbed rarely solves a problem)."""
    return [float(len(c[-1]["content"]) % 3) for c in completions]


@pytest.mark.parametrize("name", ["s_trace", "grpo_lambda"])
def test_trains_a_tiny_model_and_logs_credo_metrics(name, model_and_tokenizer, tmp_path):
    from credo.integrations.trl import CredoGRPOTrainer, TaskReward
    from credo.tasks import ArithTask

    model, tokenizer = model_and_tokenizer
    task = ArithTask()
    reward = TaskReward(task)
    dataset = reward.dataset(itertools.islice(task.train_problems(seed=0), 8))
    # 2 optimiser steps on one generation batch: the second is off-policy (TRL computes old log-probs)
    args = grpo_config(tmp_path, gradient_accumulation_steps=1, max_steps=2, learning_rate=1e-2,
                       max_completion_length=12, logging_strategy="steps", logging_steps=1)
    trainer = CredoGRPOTrainer(model=model, reward_funcs=[reward, varied_reward], args=args, train_dataset=dataset,
                               processing_class=tokenizer, credo_method=name)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    moved = sum(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before))
    assert moved > 1e-4

    first, second = trainer.state.log_history[:2]
    assert first["credo/credit/adv_abs_mean"] > 0 and "rewards/credo_arith/mean" in first
    assert first["credo/ratio/mean"] == pytest.approx(1.0, abs=1e-5)  # on-policy: the first step's ratios are 1
    assert abs(second["credo/ratio/mean"] - 1.0) > 1e-4  # the update moved pi away from pi_old
    assert second["credo/trace/weight_mean"] != pytest.approx(1.0, abs=1e-6)
    assert second["credo/loss/tokens"] > 0 and first["entropy"] > 0
    if name == "s_trace":
        assert 0.2 <= first["credo/credit/trace_token_share"] < 0.5  # the top-20% entropy tokens (ties kept)


def test_task_reward_verifies_with_the_task():
    pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from credo.integrations.trl import TaskReward
    from credo.tasks import ArithTask
    from credo.tasks.arith import solution

    task = ArithTask()
    reward = TaskReward(task)
    problems = list(itertools.islice(task.train_problems(seed=3), 2))
    first = reward.dataset(problems[:1])
    second = reward.dataset(problems[1:], chat=False)
    assert second["credo_problem"] == [1] and second["prompt"] == [problems[1].prompt]
    assert first["prompt"] == [[{"role": "user", "content": problems[0].prompt}]]
    right = solution(problems[1].meta["chain"])
    completions = [[{"role": "assistant", "content": right}], [{"role": "assistant", "content": "no answer"}], right]
    assert reward(completions, credo_problem=[1, 1, 0]) == [1.0, 0.0, 0.0]  # problem 0 has another answer
    assert reward.__name__ == "credo_arith"


# ------------------------------------------------------------------------------------------ (d) clear errors
@pytest.mark.parametrize("name, reason", [
    ("srpo", "resets of failed rollouts"), ("rrpo", "resets of failed rollouts"), ("srpo_clip", "resets of failed rollouts"),
    ("ibpo", "revisions"), ("ibpo_clip", "revisions"), ("oracle_blame", "step checker"),
])
def test_methods_with_their_own_sampler_are_clear_errors(name, reason, tmp_path):
    pytest.importorskip("trl")
    from credo.integrations.trl import CredoGRPOTrainer

    with pytest.raises(ValueError, match=reason) as error:  # before any model is loaded: "no-model" is never read
        CredoGRPOTrainer(model="no-model", reward_funcs=[scripted_reward], args=grpo_config(tmp_path),
                         credo_method=name)
    message = str(error.value)
    assert f"{name!r}" in message and "credo train" in message
    if name != "oracle_blame":  # the others have samplers of their own, which credo's trainer and verl's run
        assert "i.i.d. groups" in message and "credo.integrations.verl" in message


@pytest.mark.parametrize("settings, field", [
    ({"loss_type": "grpo"}, "loss_type"), ({"epsilon_high": 0.28}, "epsilon_high"),
    ({"scale_rewards": "batch"}, "scale_rewards"), ({"top_entropy_quantile": 0.2}, "top_entropy_quantile"),
    ({"beta": 0.1, "use_bias_correction_kl": True}, "use_bias_correction_kl"),  # TRL 1.10 on: its default
])
def test_trl_loss_settings_credo_replaces_are_errors(settings, field, tmp_path):
    pytest.importorskip("trl")
    from credo.integrations.trl import CredoGRPOTrainer

    with pytest.raises(ValueError, match=field):
        CredoGRPOTrainer(model="no-model", reward_funcs=[scripted_reward], args=grpo_config(tmp_path, **settings))


def test_overrides_and_conventions_resolve_to_the_method(tmp_path):
    pytest.importorskip("trl")
    from credo.integrations.trl import resolve_method

    args = grpo_config(tmp_path, beta=0.02, use_bias_correction_kl=False, max_completion_length=32)
    method = resolve_method("dr_grpo", {"loss": {"clip_high": 0.3}}, "trl", args)
    assert (method.estimator.std_ddof, method.estimator.eps, method.estimator.scale) == (1, 1e-4, "none")
    assert (method.loss.empty_rows, method.loss.norm_len, method.loss.log_ratio_clamp) == ("count", 32, None)
    assert (method.loss.clip_high, method.loss.kl_beta) == (0.3, 0.02)
    own = resolve_method("s_trace", {"credit": {"keep_frac": 0.5}}, "credo", args)
    assert own.estimator == get_method("s_trace", estimator={"keep_frac": 0.5}).estimator
    assert own.loss == get_method("s_trace", loss={"kl_beta": 0.02}).loss
    with pytest.raises(ValueError, match="unknown switch"):
        resolve_method("grpo", {"loss": {"lamda": 0.9}}, "credo", args)
    with pytest.raises(ValueError, match="allowed: credit, loss"):
        resolve_method("grpo", {"estimator": {}}, "credo", args)
    with pytest.raises(ValueError, match="GRPOConfig.beta"):
        resolve_method("grpo", {"loss": {"kl_beta": 0.1}}, "credo", args)
    with pytest.raises(ValueError, match="credo_conventions"):
        resolve_method("grpo", None, "verl", args)


def test_the_example_config_is_a_valid_trainer_config(tmp_path):
    pytest.importorskip("trl")
    import yaml
    from trl import GRPOConfig

    from credo.integrations.trl import check_trl_args, resolve_method

    config = yaml.safe_load(EXAMPLE.read_text())
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **config["grpo"])
    check_trl_args(args)
    credo = config["credo"]
    method = resolve_method(credo["method"], credo["overrides"], credo["conventions"], args)
    assert (method.name, method.loss.decay, method.estimator.keep_frac) == ("s_trace", 0.95, 0.2)
    assert args.generation_batch_size == 64 and args.generation_batch_size % args.num_generations == 0
    assert args.steps_per_generation > args.gradient_accumulation_steps  # off-policy steps: traces differ from GRPO


# ------------------------------------------------------------------------------------------ (e) missing TRL
def test_missing_trl_names_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "credo.integrations.trl", raising=False)
    monkeypatch.setitem(sys.modules, "trl", None)  # what `import trl` sees when TRL is not installed
    with pytest.raises(MissingExtra, match=r"pip install 'credo\[trl\]'"):
        importlib.import_module("credo.integrations.trl")


def test_a_chat_prompt_reaches_trl_with_its_whole_conversation():
    pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from credo.integrations.trl import TaskReward
    from credo.tasks import ArithTask
    from credo.tasks.base import Problem
    from credo.tasks.chat import ChatPrompt

    chat = ChatPrompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}])
    dataset = TaskReward(ArithTask()).dataset([Problem(chat, "2"), Problem("2+2?", "4")])
    assert dataset[0]["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    assert dataset[1]["prompt"] == [{"role": "user", "content": "2+2?"}]


@pytest.mark.slow
def test_two_processes_over_gloo_equal_one(model_and_tokenizer, tmp_path):
    """The same generation batch (`trl_processes.py`: scripted completions, one prompt) trained by one process and
    by two (`accelerate launch --multi_gpu --num_processes 2`, gloo on a machine without GPUs): the advantages of
    every row, the loss (two processes: the mean of theirs, as DDP averages gradients) and the weights after an
    on-policy and an off-policy step are the same."""
    import os
    import socket
    import subprocess

    script = Path(__file__).with_name("trl_processes.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    with socket.socket() as free:  # a free port for the two processes' rendezvous
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    runs = {1: [sys.executable, str(script)],
            2: [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", str(port), str(script)]}
    for processes, command in runs.items():
        out = tmp_path / str(processes)
        out.mkdir()
        done = subprocess.run([*command, str(out), "s_trace"], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    one = torch.load(tmp_path / "1" / "rank0.pt")
    two = [torch.load(tmp_path / "2" / f"rank{rank}.pt") for rank in range(2)]
    assert one["processes"] == 1 and [t["processes"] for t in two] == [2, 2]
    [advantages] = one["advantages"]  # one generation batch, used by both optimiser steps
    assert torch.equal(torch.cat([two[0]["advantages"][0], two[1]["advantages"][0]]), advantages)
    assert advantages.abs().max() > 0.1
    on_policy, off_policy = one["losses"]
    assert abs(off_policy) > 0.01  # the second step's ratios left 1
    assert [sum(t["losses"][step] for t in two) / 2 for step in range(2)] == pytest.approx([on_policy, off_policy],
                                                                                            abs=1e-6)
    moved = (one["weights"] - one["start"]).abs().max()
    assert moved > 1e-3 and torch.allclose(two[0]["weights"], one["weights"], atol=1e-6)
    assert torch.equal(two[0]["weights"], two[1]["weights"])
