"""The trainer end to end on tiny settings: every testbed config, resumption after SIGKILL, bad input."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny import TINY, make_arith_verifier_flaky

from credo.config import ModelConfig, load_config
from credo.models import load_model
from credo.train import train

CONFIGS = sorted((Path(__file__).parents[1] / "configs" / "testbed").glob("*.yaml"))
TIMING = ("time/", "tokens_per_s", "wall_s")


def run(tmp_path, config_path=None, extra=(), name="run"):
    config = load_config(config_path, TINY + list(extra))
    return train(config, tmp_path / name, show_progress=False), tmp_path / name


def untimed(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(TIMING)}


@pytest.mark.parametrize("config_path", CONFIGS, ids=lambda p: p.stem)
def test_every_testbed_config_trains(tmp_path, config_path):
    summary, run_dir = run(tmp_path, config_path)
    assert summary["method"] == load_config(config_path).method
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0 and summary["wall_s"] > 0
    for key in ("eval_start", "eval_end"):
        result = summary[key]
        assert {"greedy_pass@1", "pass@1", "pass@2", "avg@2"} <= set(result)
        assert set(result["by_difficulty"]) == {"steps=2", "steps=4", "steps=6"}
        assert all(0.0 <= result[k] <= 1.0 for k in ("greedy_pass@1", "pass@1", "pass@2", "avg@2"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "eval" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["step"] for r in records if "eval" in r] == [0, 2, 3]
    assert steps[-1]["rollout_tokens"] == summary["rollout_tokens"]
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert (run_dir / "plots" / "learning_curve.png").stat().st_size > 1000
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6 and len(samples[0]["tokens"]) == len(samples[0]["advantage"])
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(run_dir / "model")  # the exported model loads (or this raises)


def kill_training_after(settings: list[str], killed_dir: Path, step: int) -> None:
    """Train with `settings` in a subprocess and SIGKILL it once metrics.jsonl holds `step`'s record."""
    command = [sys.executable, "-m", "credo", "train", "--output", str(killed_dir)]
    for item in settings:
        command += ["--set", item]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    deadline = time.time() + 120
    metrics = killed_dir / "metrics.jsonl"
    while not (metrics.exists() and f'"step": {step},' in metrics.read_text()):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (killed_dir / "summary.json").exists()  # it really stopped mid-run


@pytest.mark.parametrize("method", ["grpo", "rrpo", "ibpo"])  # rrpo's localiser, ibpo's references: Python's RNG
def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path, method):
    settings = TINY + ["train.steps=12", "train.checkpoint_every=3", "train.eval_every=4", "optim.minibatches=2",
                       f"method={method}"]
    straight, straight_dir = run(tmp_path, None, settings[len(TINY):], name="straight")
    killed_dir = tmp_path / "killed"
    kill_training_after(settings, killed_dir, 7)  # past the step-6 checkpoint
    resumed = train(load_config(killed_dir / "config.yaml"), killed_dir, resume=True, show_progress=False)
    a = [untimed(json.loads(x)) for x in (straight_dir / "metrics.jsonl").read_text().splitlines()]
    b = [untimed(json.loads(x)) for x in (killed_dir / "metrics.jsonl").read_text().splitlines()]
    assert a == b
    assert resumed["eval_end"] == straight["eval_end"]
    assert resumed["rollout_tokens"] == straight["rollout_tokens"]


def records_of(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


BUDGET = ["train.steps=6", "train.eval_every=100", "train.checkpoint_every=100"]
"""Six steps of 60-72 rollout tokens, evaluated and checkpointed only at the start and after the last."""


def test_a_rollout_token_budget_ends_the_run_at_the_step_that_reaches_it(tmp_path):
    summary, run_dir = run(tmp_path, None, BUDGET + ["train.rollout_tokens=150"])
    records = records_of(run_dir)
    steps = [r for r in records if "eval" not in r]
    last = steps[-1]["step"]
    assert 1 < last < 6 and [r["step"] for r in steps] == list(range(1, last + 1))
    assert steps[-1]["rollout_tokens"] >= 150 > steps[-2]["rollout_tokens"]
    evals = [(r["step"], r["rollout_tokens"]) for r in records if "eval" in r]
    assert evals == [(0, 0), (last, steps[-1]["rollout_tokens"])]
    assert [p.name for p in sorted((run_dir / "checkpoints").glob("step_*"))] == [f"step_{last:06d}"]
    assert (summary["steps"], summary["rollout_tokens"]) == (last, steps[-1]["rollout_tokens"])
    assert summary["eval_end"] == records[-1]["eval"]


def test_the_last_evaluation_takes_the_final_samples(tmp_path):
    summary, run_dir = run(tmp_path, None, ["eval.samples=0", "eval.final_samples=3", "eval.ks=[1, 3]"])
    evals = [r["eval"] for r in records_of(run_dir) if "eval" in r]
    assert len(evals) == 3 and all("pass@1" not in e for e in evals[:-1])
    assert {"pass@1", "pass@3", "avg@3"} <= set(evals[-1]) and summary["eval_end"] == evals[-1]


def test_the_last_evaluation_samples_more_problems_and_more_temperatures(tmp_path):
    """`eval.final_sample_problems` widens the last evaluation's sampled set and `eval.final_temperatures` samples it
    again at each temperature, keyed `@t<T>`; the evaluations along the curve keep one temperature."""
    summary, run_dir = run(tmp_path, None, ["eval.samples=2", "eval.sample_problems=1", "eval.final_samples=3",
                                            "eval.final_sample_problems=2", "eval.ks=[1, 3]",
                                            "eval.final_temperatures=[0.5]", "eval.top_p=0.9"])
    evals = [r["eval"] for r in records_of(run_dir) if "eval" in r]
    assert not any(k.endswith("@t0.5") for e in evals[:-1] for k in e)
    assert {"pass@1@t0.5", "pass@3@t0.5", "avg@3@t0.5", "avg@3", "greedy_pass@1"} <= set(evals[-1])
    assert "greedy_pass@1@t0.5" not in evals[-1]  # greedy is greedy at any temperature
    bucket = next(iter(evals[-1]["by_difficulty"].values()))
    assert {"pass@1@t0.5", "sampled_tokens@t0.5", "problems"} <= set(bucket)


def test_final_sample_problems_above_the_evaluated_problems_is_a_clear_error():
    with pytest.raises(ValueError, match="eval.final_sample_problems 300 is above eval.max_problems 200"):
        load_config(None, ["eval.max_problems=200", "eval.final_sample_problems=300"])


def test_a_budget_the_steps_do_not_reach_changes_nothing(tmp_path):
    _, plain_dir = run(tmp_path, None, [], name="plain")
    summary, budget_dir = run(tmp_path, None, ["train.rollout_tokens=100000"], name="budget")
    assert summary["steps"] == 3
    assert [untimed(r) for r in records_of(budget_dir)] == [untimed(r) for r in records_of(plain_dir)]


def test_a_run_stopped_by_its_budget_resumes_with_a_larger_one(tmp_path):
    _, straight_dir = run(tmp_path, None, BUDGET + ["train.rollout_tokens=300"], name="straight")
    _, run_dir = run(tmp_path, None, BUDGET + ["train.rollout_tokens=150"])
    first = [r["step"] for r in records_of(run_dir) if "eval" not in r][-1]
    resumed = train(load_config(run_dir / "config.yaml", ["train.rollout_tokens=300"]), run_dir, resume=True,
                    show_progress=False)
    straight, records = records_of(straight_dir), records_of(run_dir)
    assert first < resumed["steps"] < 6 and resumed["rollout_tokens"] >= 300
    steps = [untimed(r) for r in records if "eval" not in r]
    assert steps == [untimed(r) for r in straight if "eval" not in r]  # the same steps as one run to 300 tokens
    assert [r["step"] for r in records if "eval" in r] == [0, first, resumed["steps"]]
    again = train(load_config(run_dir / "config.yaml"), run_dir, resume=True, show_progress=False)
    assert again["steps"] == resumed["steps"] and records_of(run_dir) == records  # past its budget: no step


def test_a_step_reaches_the_largest_token_checkpoint_it_passes():
    from credo.train import token_checkpoint_reached

    def reached(every, before, after):
        return token_checkpoint_reached(load_config(None, [f"train.eval_every_tokens={every}"]), before, after)

    assert reached(50, None, 0) == 0  # the evaluation before the first step
    assert [reached(50, 0, t) for t in (49, 50, 99, 100, 149)] == [None, 50, 50, 100, 100]
    assert [reached(50, 50, t) for t in (50, 99, 100)] == [None, None, 100]  # 50 was the previous step's
    assert reached(50, 132, 212) == 200 and reached(1, 7, 8) == 8
    assert token_checkpoint_reached(load_config(None), 0, 10**6) is None  # no token checkpoints


TOKEN_CHECKPOINTS = 50
"""The tiny runs' steps generate 60-72 rollout tokens: every step passes one or two multiples of 50."""


def check_token_checkpoints(records: list[dict], every: int) -> list[tuple[int, int]]:
    """Check that the eval records' `token_checkpoint`s serve every multiple of `every` the run's rollout tokens
    reached, each at the first step at or after it, in one record per step; returns (step, checkpoint) pairs."""
    tokens = [0] + [r["rollout_tokens"] for r in records if "eval" not in r]  # tokens[s]: after step s
    assert [r["step"] for r in records if "eval" not in r] == list(range(1, len(tokens)))
    evals = [r for r in records if "eval" in r]
    assert len({r["step"] for r in evals}) == len(evals)  # one evaluation per step at most
    assert all(r["rollout_tokens"] == tokens[r["step"]] for r in evals)
    served = [(r["step"], r["token_checkpoint"]) for r in evals if "token_checkpoint" in r]
    assert served[0] == (0, 0)
    previous = 0
    for step, checkpoint in served[1:]:
        assert isinstance(checkpoint, int) and checkpoint % every == 0 and checkpoint > previous
        assert tokens[step] >= checkpoint > tokens[step - 1]  # reached at this step, not before
        assert tokens[step] < checkpoint + every  # the largest it reached
        for skipped in range(previous + every, checkpoint, every):  # passed by the same step: served by this record
            assert tokens[step - 1] < skipped
        previous = checkpoint
    assert tokens[-1] < previous + every  # every multiple the run reached is served
    return served


def test_token_checkpoints_are_evaluated_at_the_first_step_that_reaches_them(tmp_path):
    every = TOKEN_CHECKPOINTS
    _, run_dir = run(tmp_path, None, ["train.steps=6", "train.eval_every=2", "train.checkpoint_every=100",
                                      f"train.eval_every_tokens={every}"])
    records = records_of(run_dir)
    served = check_token_checkpoints(records, every)
    tokens = [0] + [r["rollout_tokens"] for r in records if "eval" not in r]
    crossing = [s for s in range(1, 7) if tokens[s] // every > tokens[s - 1] // every]
    assert [s for s, _ in served] == [0] + crossing
    assert [r["step"] for r in records if "eval" in r] == sorted({0, 2, 4, 6} | set(crossing))
    assert any(b - a > every for (_, a), (_, b) in zip(served, served[1:]))  # a step passed two checkpoints
    assert {2, 4, 6} & set(crossing)  # a step due for both schedules, evaluated once


def test_a_budget_on_a_token_checkpoint_ends_on_it_and_resumes_to_the_next(tmp_path):
    every = 100
    settings = BUDGET + [f"train.eval_every_tokens={every}"]
    _, straight_dir = run(tmp_path, None, settings + ["train.rollout_tokens=300"], name="straight")
    summary, run_dir = run(tmp_path, None, settings + ["train.rollout_tokens=200"])
    records = records_of(run_dir)
    served = check_token_checkpoints(records, every)
    assert served[-1] == (summary["steps"], 200) and records[-1]["token_checkpoint"] == 200
    train(load_config(run_dir / "config.yaml", ["train.rollout_tokens=300"]), run_dir, resume=True, show_progress=False)
    records, straight = records_of(run_dir), records_of(straight_dir)
    assert [untimed(r) for r in records] == [untimed(r) for r in straight]  # its evaluations included
    assert check_token_checkpoints(records, every)[-1][1] == 300


def test_token_checkpoints_survive_sigkill_and_resume(tmp_path):
    # A checkpoint every 150 tokens, about every other step: a resumed run that lost track of the tokens before
    # its first step would evaluate that step for a checkpoint an earlier step reached.
    every = 150
    settings = TINY + ["train.steps=8", "train.checkpoint_every=3", "train.eval_every=100",
                       f"train.eval_every_tokens={every}"]
    straight, straight_dir = run(tmp_path, None, settings[len(TINY):], name="straight")
    killed_dir = tmp_path / "killed"
    kill_training_after(settings, killed_dir, 4)  # past the step-3 checkpoint
    resumed_from = int(sorted((killed_dir / "checkpoints").glob("step_*"))[-1].name.removeprefix("step_"))
    resumed = train(load_config(killed_dir / "config.yaml"), killed_dir, resume=True, show_progress=False)
    a, b = records_of(straight_dir), records_of(killed_dir)
    served = check_token_checkpoints(b, every)
    assert [untimed(r) for r in a] == [untimed(r) for r in b]
    assert resumed_from < 8 and any(step > resumed_from for step, _ in served[1:])
    assert resumed["eval_end"] == straight["eval_end"]


@pytest.mark.parametrize("limit", ["optim.micro_batch_size=1", "optim.micro_batch_tokens=60"])
def test_micro_batches_give_the_same_update(tmp_path, limit):
    whole, _ = run(tmp_path, None, ["train.steps=2"], name="whole")
    micro, _ = run(tmp_path, None, ["train.steps=2", limit], name="micro")
    a = json.loads((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()[2])
    b = json.loads((tmp_path / "micro" / "metrics.jsonl").read_text().splitlines()[2])
    assert a["reward/mean"] == b["reward/mean"]  # same rollouts after one identical update
    assert a["loss/policy"] == pytest.approx(b["loss/policy"], rel=1e-5, abs=1e-7)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


def test_on_policy_update_gives_the_update_of_a_separate_behaviour_pass(tmp_path, monkeypatch):
    import dataclasses

    import credo.train as train_module

    run(tmp_path, None, ["train.steps=2"], name="on_policy")
    build = train_module.build_trainer
    monkeypatch.setattr(train_module, "build_trainer",
                        lambda *args, **kwargs: dataclasses.replace(build(*args, **kwargs), on_policy=False))
    run(tmp_path, None, ["train.steps=2"], name="behaviour_pass")
    a, b = ([json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
            for name in ("on_policy", "behaviour_pass"))
    for x, y in zip(a[1:3], b[1:3]):  # the two steps (after the first evaluation)
        assert x["reward/mean"] == y["reward/mean"]  # the same rollouts: the first updates agreed
        for key in ("loss/policy", "grad_norm", "entropy/mean"):
            assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-7), key


@pytest.mark.parametrize(("method", "extra", "on_policy"), [
    ("grpo", [], True), ("grpo", ["optim.minibatches=2"], False), ("grpo", ["optim.epochs=2"], False),
    ("s_trace", [], False),  # its credit reads the behaviour entropies before the update
    ("srpo", [], True),
])
def test_which_runs_skip_the_behaviour_pass(tmp_path, method, extra, on_policy):
    from credo.checkpoint import RunDirectory
    from credo.run_setup import build_trainer

    config = load_config(None, TINY + [f"method={method}"] + extra)
    assert build_trainer(config, RunDirectory(tmp_path)).on_policy is on_policy


def test_existing_run_directory_is_not_overwritten(tmp_path):
    run(tmp_path, None, ["train.steps=1"])
    with pytest.raises(FileExistsError, match="--resume"):
        run(tmp_path, None, ["train.steps=1"])


def test_missing_model_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.path = '/no/such/model'"):
        run(tmp_path, None, ["model.path=/no/such/model"])


def test_verifier_that_raises_stops_the_step_with_the_prompt(tmp_path, monkeypatch):
    from credo.tasks.arith import ArithTask

    def broken(self, problem, response):
        raise KeyError("boom")

    monkeypatch.setattr(ArithTask, "verify", broken)
    with pytest.raises(RuntimeError, match=r"(?s)verifier raised KeyError.*prompt:"):
        run(tmp_path, None, ["eval.greedy=false", "eval.samples=0", "eval.ks=[1]"])


def test_verifier_errors_can_score_zero(tmp_path, monkeypatch):
    make_arith_verifier_flaky(monkeypatch)
    _, run_dir = run(tmp_path, None, ["rollout.reward_errors=zero", "eval.greedy=false", "eval.samples=0", "eval.ks=[1]"])
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' not in x]
    assert sum(r["rollout/reward_errors"] for r in steps) == 6  # 18 responses, every third raised


def test_exported_model_holds_the_trained_weights(tmp_path, monkeypatch):
    from credo.tasks import Verdict
    from credo.tasks.arith import ArithTask

    # The tiny model never answers right; reward odd-length responses so that the groups carry signal.
    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))
    _, run_dir = run(tmp_path, None, ["train.steps=2", "optim.lr=1e-2", "rollout.group_size=4"])
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' not in x]
    assert any(r["credit/adv_abs_mean"] > 0 for r in steps)
    trained, _ = load_model(ModelConfig(path=str(run_dir / "model")), torch.device("cpu"))
    start, _ = load_model(load_config(None, TINY).model, torch.device("cpu"))
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), start.parameters()))
    from safetensors.torch import load_file

    last = load_file(sorted((run_dir / "checkpoints").glob("step_*"))[-1] / "trainable.safetensors")
    assert all(torch.equal(last[n], p) for n, p in trained.named_parameters())


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", ["grpo", "p_trace", "s_trace", "grpo_lambda", "grpo_lambda_recent", "rrpo", "srpo", "srpo_oracle", "ibpo"]
)
def test_methods_improve_the_testbed(tmp_path, monkeypatch, method):
    # The real testbed model (built once into the user's cache, ~5 minutes on 2 cores), 40 RL steps.
    monkeypatch.delenv("CREDO_CACHE")
    config = load_config(
        Path(__file__).parents[1] / "configs" / "testbed" / f"{method}.yaml",
        ["train.steps=40", "train.eval_every=40", "eval.samples=0", "eval.ks=[1]", "eval.max_problems=100"],
    )
    summary = train(config, tmp_path / method, show_progress=False)
    start, end = summary["eval_start"]["greedy_pass@1"], summary["eval_end"]["greedy_pass@1"]
    assert end - start >= 0.10, (start, end)
    if method == "ibpo":  # the testbed model learned to revise: some failures are repaired
        steps = [json.loads(x) for x in (tmp_path / method / "metrics.jsonl").read_text().splitlines()]
        success = [r["revisions/success_rate"] for r in steps if "revisions/success_rate" in r]
        assert len(success) == 40 and sum(success) / 40 > 0.05, success


def test_lora_trains_only_the_adapters(tmp_path, monkeypatch):
    from credo.checkpoint import RunDirectory, TrainState
    from credo.rollout.groups import ProblemStream
    from credo.tasks import Verdict
    from credo.tasks.arith import ArithTask
    from credo.train import behaviour_batch, sample_rollout, update
    from credo.run_setup import build_trainer

    # The tiny model never answers right; reward odd-length responses so that the groups carry signal.
    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))
    config = load_config(None, TINY + ["model.lora={r: 4, alpha: 8}", "optim.lr=1e-2", "rollout.group_size=4"])
    trainer = build_trainer(config, RunDirectory(tmp_path / "lora"))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    stream = ProblemStream(trainer.task, seed=0)
    for _ in range(3):
        batch, _ = trainer.method.credit(behaviour_batch(trainer, sample_rollout(trainer, stream))[0])
        update(trainer, batch, TrainState())
    after = dict(trainer.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before if n not in trainable)
    assert any(not torch.equal(before[n], after[n]) for n in trainable)
    base, _ = load_model(ModelConfig(**{**config.model.model_dump(), "lora": None}), torch.device("cpu"))
    frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p for n, p in after.items() if n not in trainable}
    assert all(torch.equal(frozen[n], p) for n, p in base.named_parameters())


def test_jsonl_task_trains(tmp_path):
    from credo.tasks.arith import ArithTask, solution

    task = ArithTask()
    lines = [json.dumps({"prompt": p.prompt, "answer": p.answer, "difficulty": p.difficulty})
             for p, _ in zip(task.train_problems(1), range(40))]
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    summary, run_dir = run(tmp_path, None, [f"task={{name: jsonl, path: {tmp_path / 'data.jsonl'}}}"])
    assert summary["steps"] == 3
    assert set(summary["eval_end"]["by_difficulty"]) <= {"steps=2", "steps=3", "steps=4", "steps=5", "steps=6"}
    assert solution  # the answers above are the chains' values, graded by the last number


def test_stop_strings_end_responses():
    from credo.rollout.generate import cut_response
    from credo.testbed import build_tokenizer

    tok = build_tokenizer()
    ids = tok("+5=12</thought>*3=36</thought>", add_special_tokens=False)["input_ids"]
    cut, done = cut_response(list(ids), tok.eos_token_id, tok.pad_token_id, tok, ["</thought>"])
    assert done and tok.decode(cut) == "+5=12</thought>"
    cut, done = cut_response(list(ids), tok.eos_token_id, tok.pad_token_id, tok, ["*3"])
    assert done and tok.decode(cut) == "+5=12</thought>*3"
    cut, done = cut_response(list(ids) + [tok.eos_token_id, 7], tok.eos_token_id, tok.pad_token_id, tok, [])
    assert done and cut[-1] == tok.eos_token_id and len(cut) == len(ids) + 1
    cut, done = cut_response(list(ids), tok.eos_token_id, tok.pad_token_id, tok, [])
    assert not done and cut == list(ids)  # no end token: truncated at max_new_tokens


def test_logged_credit_is_minus_rows_times_the_loss_gradient(tmp_path):
    # GRPO with one mini-batch trains at pi = pi_old, where its seq-mean-token-mean loss
    # -(1/B) sum_b (1/n_b) sum_t ratio_bt A_bt has dLoss/dlogp_bt = -A_bt / (B n_b): credit = -B dL/dlogp = A_bt / n_b.
    # DAPO's overlong penalty gives the tiny model's (always wrong) responses rewards that differ by length.
    _, run_dir = run(tmp_path, None, ["train.steps=2", "train.log_samples=6", "rollout.overlong_buffer=6"])
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert any(any(s["advantage"]) for s in samples)
    for s in samples:
        n = sum(s["loss_mask"])
        assert s["credit"] == pytest.approx([a / n if m else 0.0 for a, m in zip(s["advantage"], s["loss_mask"])], abs=1e-4)


def test_blame_precision_is_logged_on_step_checked_tasks(tmp_path):
    summary, run_dir = run(tmp_path, None, ["rollout.overlong_buffer=6"])
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    precisions = [r["credit/blame_precision"] for r in steps if "credit/blame_precision" in r]
    assert precisions and all(0.0 <= p <= 1.0 for p in precisions)
    assert summary["blame_precision"] == pytest.approx(sum(precisions) / len(precisions))
    assert (summary["task"], summary["seed"]) == ("arith", 0)
    threads = torch.get_num_threads()
    assert summary["device"] == f"cpu ({threads} thread{'s' if threads != 1 else ''})"  # where it trained


SMOLLM2_CONFIGS = sorted((Path(__file__).parents[1] / "configs" / "smollm2").glob("*.yaml"))


@pytest.mark.parametrize("config_path", SMOLLM2_CONFIGS, ids=lambda p: p.stem)
def test_smollm2_configs_validate(config_path):
    config = load_config(config_path)
    assert config.model.path == "smollm2-135m" and config.task["name"] == "reasoning_gym:chain_sum"


@pytest.mark.slow
def test_smollm2_trains_a_few_grpo_steps_on_a_reasoning_gym_task(tmp_path):
    # The real SmolLM2-135M-Instruct (the preset, converted into this session's cache) on chain_sum, on CPU.
    config = load_config(Path(__file__).parents[1] / "configs" / "smollm2" / "grpo.yaml", [
        "train.steps=3", "train.eval_every=3", "train.checkpoint_every=3", "rollout.prompts_per_step=4",
        "rollout.max_new_tokens=32", "eval.samples=0", "eval.ks=[1]", "task.eval_size=8",
    ])
    summary = train(config, tmp_path / "smollm2", show_progress=False)
    records = [json.loads(line) for line in (tmp_path / "smollm2" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "eval" not in r]
    assert len(steps) == 3 and summary["skipped_steps"] == 0
    assert all(0.0 < r["reward/mean"] < 1.0 for r in steps)  # mixed groups: the model gets some sums right
    assert all(r["grad_norm"] > 0 and math.isfinite(r["loss/policy"]) for r in steps)
    start, _ = load_model(config.model, torch.device("cpu"))
    trained, _ = load_model(ModelConfig(path=str(tmp_path / "smollm2" / "model")), torch.device("cpu"))
    changed = [n for (n, a), (_, b) in zip(start.named_parameters(), trained.named_parameters()) if not torch.equal(a, b)]
    assert len(changed) > 100  # full fine-tuning moved the weights (272 tensors)


@pytest.mark.parametrize("setting, device, autocast, expected", [
    (None, "cuda", True, True),     # unset: on where the passes are bf16 anyway
    (None, "cuda", False, None),    # unset without autocast: torch's own setting stays
    (False, "cuda", True, False),   # set: as set
    (True, "cuda", False, True),
    (True, "cpu", True, None),      # no effect off CUDA
])
def test_tf32_follows_its_setting_on_cuda_and_autocast_where_unset(setting, device, autocast, expected):
    from credo.run_setup import uses_tf32

    assert uses_tf32(setting, torch.device(device), autocast) is expected


TRL_USER_REWARDS = '''
import asyncio

SEEN = []

async def judged_length(completions, **kwargs):
    await asyncio.sleep(0)
    return [min(len(c[0]["content"]), 100) / 100 for c in completions]

def progress(completions, completion_ids, trainer_state, log_metric, **kwargs):
    SEEN.append((trainer_state.global_step, len(completion_ids)))
    log_metric("progress/mean_ids", sum(map(len, completion_ids)) / len(completion_ids))
    return [0.0 for _ in completions]
'''


@pytest.mark.slow
def test_smollm2_trains_on_a_conversational_parquet_with_trls_own_reward_functions(tmp_path, monkeypatch):
    """A TRL user's set-up as it is: a conversational parquet dataset (`prompt` a message list, a `solution`
    column) and `task.reward` naming TRL's `accuracy_reward` and `think_format_reward`, an async function and
    one taking TRL 1.16's keywords; each function's mean is logged under TRL's name."""
    pytest.importorskip("trl")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from credo.io import read_jsonl

    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}? Think in <think></think>, then answer."}],
             "solution": f"${a + b}$"} for a in range(1, 5) for b in range(1, 5)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    (tmp_path / "user_rewards.py").write_text(TRL_USER_REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_rewards", raising=False)
    task = {"name": "dataset", "path": "train.parquet", "eval_fraction": 0.25,
            "reward": ["trl.rewards:accuracy_reward", {"function": "trl.rewards:think_format_reward", "weight": 0.5},
                       {"function": "user_rewards:judged_length", "weight": 0.1}, "user_rewards:progress"]}
    config = load_config(None, [
        "model.path=smollm2-135m", f"task={json.dumps(task)}", "train.steps=2", "train.eval_every=2",
        "train.checkpoint_every=2", "rollout.prompts_per_step=2", "rollout.group_size=2",
        "rollout.max_new_tokens=24", "optim.lr=5e-6", "eval.samples=0", "eval.ks=[1]", "eval.max_problems=2",
    ])
    summary = train(config, tmp_path / "run", show_progress=False)
    steps = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "reward/mean" in r]
    assert len(steps) == 2 and summary["skipped_steps"] == 0
    for name in ("accuracy_reward", "think_format_reward", "judged_length", "progress"):
        assert all(f"rewards/{name}/mean" in r and f"rewards/{name}/std" in r for r in steps), name
    assert all(0.0 < r["rewards/judged_length/mean"] <= 1.0 and r["progress/mean_ids"] > 0 for r in steps)
    import user_rewards

    assert [step for step, rows in user_rewards.SEEN if rows == 4] == [0, 1]  # each step's 2 x 2 responses
    sys.modules.pop("user_rewards")


def test_the_logged_update_size_is_the_weights_change(tmp_path, monkeypatch):
    # One step of two mini-batches: optim/update_norm is ||theta_after - theta_before|| over both optimiser steps, and
    # optim/update_rel that over ||theta_before||, read off the saved weights. (The tiny model never answers right:
    # odd-length responses are rewarded so that the groups carry signal.)
    from credo.tasks import Verdict
    from credo.tasks.arith import ArithTask

    monkeypatch.setattr(ArithTask, "verify", lambda self, p, r: Verdict(float(len(r) % 2), bool(len(r) % 2)))
    summary, run_dir = run(tmp_path, None, ["train.steps=1", "train.eval_every=5", "optim.minibatches=2",
                                            "optim.lr=0.01"])
    config = load_config(None, TINY)
    start, _ = load_model(config.model, torch.device("cpu"))
    trained, _ = load_model(ModelConfig(path=str(run_dir / "model")), torch.device("cpu"))
    change = torch.cat([(b - a).flatten() for a, b in zip(start.parameters(), trained.parameters())]).norm()
    size = torch.cat([a.flatten() for a in start.parameters()]).norm()
    record = next(json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                  if '"optim/update_norm"' in line)
    assert summary["steps"] == 1 and float(change) > 0
    assert record["optim/update_norm"] == pytest.approx(float(change), rel=1e-4)
    assert record["optim/update_rel"] == pytest.approx(float(change / size), rel=1e-4)


@pytest.mark.parametrize("method", ["grpo", "oracle_steps"])
def test_a_task_with_an_environment_trains_on_episodes_end_to_end(tmp_path, method):
    # the tiny model writes no valid call: every turn is read behind the sandbox, answered "?", and the episodes
    # end at the token budget; the loop, the per-turn checker's fields and the evaluation run on them all the same
    summary, run_dir = run(tmp_path, extra=[f"method={method}", "task.name=calculator", "task.min_steps=2",
                                            "task.max_steps=3", "task.eval_steps=[2]", "task.max_turns=3",
                                            "rollout.max_new_tokens=40"])
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "eval" not in r]
    # rollout tokens count the policy's turns, not the calculator's observations
    assert all(r["rollout_tokens"] <= 3 * 2 * 40 * (i + 1) for i, r in enumerate(steps))
    assert set(summary["eval_end"]["by_difficulty"]) == {"steps=2"}
    # the logged samples: the calculator's observations are in the sequence but never trained on
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    text = ["".join(s["tokens"]) for s in samples]
    assert any("<obs>?</obs>" in t for t in text)
    untrained = ["".join(t for t, trained in zip(s["tokens"], s["loss_mask"]) if not trained) for s in samples]
    assert all(u == "<obs>?</obs>" * u.count("<obs>") for u in untrained) and any(untrained)


def test_the_guessing_game_trains_on_episodes_end_to_end(tmp_path):
    # the tiny model writes no valid guess: each turn is answered "?" and the episode ends at the turn limit (the
    # minimax number of guesses, 4 for 1..10); the evaluation plays every secret of the range once
    summary, run_dir = run(tmp_path, extra=["task.name=guessing", "task.high=10", "rollout.max_new_tokens=64"])
    assert summary["steps"] == 3 and summary["rollout_tokens"] > 0
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert all("".join(s["tokens"]).count("<obs>?</obs>") <= 3 for s in samples)
    assert summary["eval_end"]["greedy_pass@1"] == 0.0
