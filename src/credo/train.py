"""The training loop: sample groups -> verify -> credit -> update, one rollout batch per step.

`train(config, run_dir)` reads top to bottom: each step samples `prompts_per_step` groups, verified as they are
drawn (`sample_rollout`: the samplers verify each response before deciding what to draw next), scores the
behaviour policy's log-probs and token statistics once (and a frozen reference policy's log-probs, for a loss
with a KL penalty; `behaviour_batch`), runs the method's credit estimator once, then takes
`minibatches * epochs` optimiser steps with the method's loss (`update`). Metrics (to metrics.jsonl and the
trackers of `train.report_to`), samples, evaluations (every `train.eval_every` steps, and at the rollout-token
checkpoints of `train.eval_every_tokens`), checkpoints and the run's summary follow, all from this loop. The run's
set-up (the `Trainer`, the device, a fresh start or a resume from the last checkpoint, the reference policy's
fingerprint) is `credo.run_setup`'s; `train(..., resume=True)` continues a killed run from its last checkpoint
exactly.
"""

from __future__ import annotations

import logging
import math
import statistics
import time

import torch

from credo.batch import RolloutBatch
from credo.checkpoint import RunDirectory, TrainState, holding_run_lock, save_checkpoint
from credo.config import EvalConfig, RunConfig, check_resume
from credo.credit.groups import failed_rows
from credo.diagnostics import blame_precision
from credo.evaluate import at_temperature, eval_subset, evaluate_policy
from credo.io import atomic_directory, write_json_atomic
from credo.models import export_model
from credo.policy import policy_logprobs
from credo.progress import TrainProgress
from credo.rollout.crn import EVAL, TRAIN
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.thoughts import blame_start, thought_verdicts, token_pieces
from credo.run_setup import (
    Trainer,
    build_trainer,
    check_reference,
    device_name,
    record_resumed_config,
    reward_state,
    start_or_resume,
)
from credo.tasks import Verdict
from credo.trackers import Trackers

log = logging.getLogger(__name__)


@holding_run_lock
def train(config: RunConfig, run_dir, *, resume: bool = False, show_progress: bool = True) -> dict:
    """Train according to `config` in `run_dir`; returns the summary (also written to summary.json).

    The run directory is locked meanwhile: a second process training in it stops with RunLockedError.
    Resuming with a config that differs from the run's config.yaml in a key outside `credo.config.RESUMABLE`
    is a ConfigError before anything loads; allowed changes are applied and recorded in config.yaml.
    """
    run = RunDirectory(run_dir)
    if resume:
        check_resume(run.root / "config.yaml", config)
    trainer = build_trainer(config, run)
    state = start_or_resume(trainer, resume)
    if resume:
        record_resumed_config(trainer, state)
    if trainer.reference is not None:
        check_reference(trainer, state)
    stream = ProblemStream(trainer.task, config.train.seed, state.data_position)
    eval_problems = eval_subset(trainer.task.eval_problems(), config.eval.max_problems)
    trackers = trainer.run.trackers(config, resumed_step=state.step if resume and state.step > 0 else None)
    try:
        with TrainProgress(config.train.steps, state.step, enabled=show_progress) as progress:
            if state.step == 0:
                report_eval(trainer, eval_problems, state, trackers, progress,
                            token_checkpoint=token_checkpoint_reached(config, None, 0))
            train_steps(trainer, state, stream, eval_problems, trackers, progress)
    finally:
        trackers.close()
    return finish(trainer, state)


def train_steps(trainer: Trainer, state: TrainState, stream: ProblemStream, eval_problems, trackers: Trackers,
                progress: TrainProgress) -> None:
    """The steps from `state.step` until the run is `finished`: each logged, evaluated and checkpointed on its
    schedule, the last one always; a step that reaches a token checkpoint (`train.eval_every_tokens`) is
    evaluated too."""
    config = trainer.config
    if finished(config, state):
        log.info("%s has already trained %d steps, %d rollout tokens: nothing left to train",
                 trainer.run.root, state.step, state.rollout_tokens)
    while not finished(config, state):
        started = time.perf_counter()
        rollout = sample_rollout(trainer, stream, state.step)
        generated = time.perf_counter()
        batch, behaviour_finite = behaviour_batch(trainer, rollout)
        batch, credit_metrics = trainer.method.credit(batch)
        scored = time.perf_counter()
        update_metrics, credit = update(trainer, batch, state, usable=behaviour_finite)
        trainer.backend.sync_weights()
        state.step += 1
        state.data_position = stream.position
        tokens_before = state.rollout_tokens
        state.rollout_tokens += rollout.generated_tokens
        state.wall_s += time.perf_counter() - started
        record = step_record(trainer, state, rollout, batch, credit, credit_metrics, update_metrics)
        custom = trainer.task.custom_reward
        logged, columns = custom.drain() if custom is not None else ({}, {})
        record.update(logged)
        record.update({
            "time/generate_s": generated - started, "time/score_credit_s": scored - generated,
            "time/update_s": time.perf_counter() - scored, "time/step_s": time.perf_counter() - started,
        })
        record["tokens_per_s"] = rollout.generated_tokens / record["time/step_s"]
        trainer.run.append(trainer.run.metrics_file, record)
        trackers.log(record, state.step)
        log_samples(trainer, state.step, rollout, batch, credit, columns)
        progress.advance(record)
        last = finished(config, state)
        if last and state.step < config.train.steps:
            log.info("step %d: %d rollout tokens reach train.rollout_tokens = %d; stopping",
                     state.step, state.rollout_tokens, config.train.rollout_tokens)
        reached = token_checkpoint_reached(config, tokens_before, state.rollout_tokens)
        if state.step % config.train.eval_every == 0 or reached is not None or last:
            report_eval(trainer, eval_problems, state, trackers, progress, final=last, token_checkpoint=reached)
        if state.step % config.train.checkpoint_every == 0 or last:
            save_checkpoint(trainer.run, trainer.model, trainer.optimizer, trainer.scheduler, state,
                            config.train.keep_checkpoints)


def finished(config: RunConfig, state: TrainState) -> bool:
    """Whether the run has trained its last step: `train.steps` of them, or the step whose generated rollout
    tokens reached `train.rollout_tokens`."""
    budget = config.train.rollout_tokens
    return state.step >= config.train.steps or (budget is not None and state.rollout_tokens >= budget)


def token_checkpoint_reached(config: RunConfig, before: int | None, after: int) -> int | None:
    """The largest token checkpoint (multiple of `train.eval_every_tokens`, 0 included) in (`before`, `after`]:
    the one a step that took the run's rollout tokens from `before` to `after` evaluates for; None when it
    passed none or the run has no token checkpoints. `before=None` is the start (`after=0`: checkpoint 0).

    It depends on the token counts only, so a resumed run (its `rollout_tokens` checkpointed) meets the same
    checkpoints at the same steps as an uninterrupted one."""
    every = config.train.eval_every_tokens
    if every is None or (before is not None and before // every == after // every):
        return None
    return after // every * every


# ------------------------------------------------------------------------------------------- the step
def sample_rollout(trainer: Trainer, stream: ProblemStream, step: int = 0) -> Rollout:
    """One verified rollout batch from the method's sampler (`credo.rollout.samplers`), keyed by the step under
    common random numbers. The sampler verifies each response as it draws it (`Rollout.verdicts`, `rewards`):
    what most samplers draw next depends on the verdicts so far (DAPO's refills, resets, revisions, value
    estimates), and verl's agent loops run the same samplers without this trainer."""
    if trainer.sampling_keys is not None:
        trainer.sampling_keys.begin(TRAIN, step)
    custom = follow_rewards(trainer, step)
    if custom is not None:  # what evaluation logged is not kept
        custom.drain()
    return trainer.method.sampler.sample(trainer.backend, trainer.task, stream, trainer.config.rollout)


def follow_rewards(trainer: Trainer, step: int):
    """The task's custom reward (None where it has none), its `trainer_state` set for step `step`."""
    custom = trainer.task.custom_reward
    if custom is not None:
        custom.state = reward_state(trainer.config, step)
    return custom


def behaviour_batch(trainer: Trainer, rollout: Rollout) -> tuple[RolloutBatch, bool]:
    """The rollout as a batch, with the behaviour policy's log-probs and per-token statistics (computed once, no
    grad): its entropies, logged for every method, and the others the method reads (`Method.behaviour_statistics`),
    the reference policy's log-probs where the loss has a KL penalty (`Trainer.reference`; once, no grad, in the
    same micro-batches), the step checker's fields where the task has one (or those the draw fixed itself, a
    multi-turn episode's: `Rollout.checks`), and whether the behaviour and reference values were finite on every
    response token.

    On-policy trainers (`Trainer.on_policy`) skip the behaviour pass (not the reference's): `old_logp`
    stays 0 until the update's own forward pass fills it, and the statistics are None (the update logs the
    entropies instead). Non-finite values are stored as 0 so that the batch can be credited and logged; the
    update must then be skipped (`update(..., usable=False)`).
    """
    c = rollout.completions
    shape = c.response_ids.shape
    old_logp = torch.zeros(shape, device=trainer.device)
    statistics = () if trainer.on_policy else sorted({"entropy"} | trainer.method.behaviour_statistics)
    scored = {name: torch.zeros(shape, device=trainer.device) for name in statistics}
    ref_logp = None if trainer.reference is None else torch.zeros(shape, device=trainer.device)
    if not trainer.on_policy or trainer.reference is not None:
        for rows in trainer.micro_batches(c.prompt_mask, c.response_mask):
            inputs = [t[rows].to(trainer.device) for t in (c.prompt_ids, c.prompt_mask, c.response_ids, c.response_mask)]
            rows = rows.to(trainer.device)
            if not trainer.on_policy:
                with torch.no_grad():
                    logp, part = policy_logprobs(trainer.model, *inputs, statistics=statistics, **trainer.scoring)
                old_logp[rows] = logp.float()
                for name, value in part.items():
                    scored[name][rows] = value.float()
            if trainer.reference is not None:
                ref_logp[rows] = trainer.reference.logprobs(*inputs, **trainer.scoring).float()
    mask = c.response_mask.to(trainer.device)
    finite = finite_on(mask, old_logp, ref_logp, *scored.values())
    if not finite:
        old_logp, ref_logp = (None if t is None else torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0)
                              for t in (old_logp, ref_logp))
        scored = {name: torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0) for name, t in scored.items()}
    checked = rollout.checks or (step_checks(trainer, rollout) if trainer.task.checks_steps else {})
    batch = rollout.batch(old_logp=old_logp, ref_logp=ref_logp, device=trainer.device, **checked)
    return batch.replace(**{name: torch.where(batch.response_mask, t, 0.0) for name, t in scored.items()}), finite


def step_checks(trainer: Trainer, rollout: Rollout) -> dict[str, torch.Tensor]:
    """The step checker's verdicts as batch fields: `blame_start` (the first token of each row's first wrong
    thought), `thought_ids` and `thought_wrong` (each token's thought, and whether the checker judged it wrong),
    the thoughts cut by the rollout's thought rules (`rollout.resets.thoughts`)."""
    rules = trainer.config.rollout.resets.thoughts
    c = rollout.completions
    starts, ids, wrong = [], torch.full(c.response_ids.shape, -1), torch.zeros(c.response_ids.shape, dtype=torch.bool)
    for row, verdict in enumerate(rollout.verdicts):
        pieces = token_pieces(trainer.tokenizer, c.response_ids[row][c.response_mask[row]].tolist())
        starts.append(blame_start(pieces, verdict.first_wrong_step, rules))
        thoughts, judged = thought_verdicts(pieces, verdict.wrong_steps, rules)
        ids[row, :len(thoughts)] = torch.tensor(thoughts, dtype=torch.long)
        wrong[row, :len(judged)] = torch.tensor(judged, dtype=torch.bool)
    return {"blame_start": torch.tensor(starts), "thought_ids": ids, "thought_wrong": wrong}


def finite_on(mask: torch.Tensor, *values: torch.Tensor | None) -> bool:
    """Whether every given (B, T) tensor is finite on the `mask`ed tokens (None: nothing to check)."""
    return all(bool(torch.isfinite(v[mask]).all()) for v in values if v is not None)


class TrainingDiverged(RuntimeError):
    """The update was skipped `train.max_nan_steps` steps in a row; the message names the step and checkpoint."""


def update(trainer: Trainer, batch: RolloutBatch, state: TrainState, *,
           usable: bool = True) -> tuple[dict[str, float], torch.Tensor]:
    """`epochs` passes of `minibatches` optimiser steps over the credited batch.

    Returns the averaged metrics (`optim/skipped`: the share of skipped optimiser steps) and the credit each
    token received, `-rows * dLoss/dlogp` of its mini-batch's loss (`credo.diagnostics`), averaged over
    epochs: (B, T). `usable=False` (a non-finite behaviour pass, see `behaviour_batch`) skips every optimiser step.
    A step with any skipped optimiser step extends `state.nan_streak`; at `train.max_nan_steps` in a row the
    run stops with `TrainingDiverged`, its checkpoints untouched (a skipped step changes no weight).
    """
    optim = trainer.config.optim
    totals: dict[str, float] = {}
    credit = torch.zeros_like(batch.old_logp)  # (B, T)
    count = 0
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    for _ in range(optim.epochs):
        order = torch.randperm(batch.size).to(batch.response_ids.device)
        for rows in order.chunk(optim.minibatches):
            metrics, minibatch_credit = optimiser_step(trainer, batch.select(rows), state, usable=usable)
            credit[rows] += minibatch_credit / optim.epochs
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            count += 1
    state.nan_streak = state.nan_streak + 1 if totals["optim/skipped"] else 0
    if state.nan_streak >= trainer.config.train.max_nan_steps:
        checkpoint = trainer.run.latest_checkpoint()
        raise TrainingDiverged(
            f"step {state.step + 1}: the update was skipped {state.nan_streak} steps in a row (train.max_nan_steps) "
            "for a non-finite log-prob, loss or gradient, or a gradient norm above train.max_grad_norm; stopping. "
            + (f"The last checkpoint, {checkpoint}, is intact" if checkpoint else "No checkpoint was written yet")
            + "; start a new run with a lower optim.lr, or check the rewards."
        )
    metrics = {key: value / count for key, value in totals.items()}
    return {**metrics, **update_size(params, start)}, credit


def update_size(params: list[torch.Tensor], start: list[torch.Tensor]) -> dict[str, float]:
    """How far one rollout batch's update moved the trainable weights: `optim/update_norm`, the L2 norm of the
    change `||theta_after - theta_before||` over all its optimiser steps, and `optim/update_rel`, that norm over
    `||theta_before||`. A study reads contrasts at matched update size from it: anything that moves the policy
    further per batch (a higher rate, more mini-batches, larger advantages) shows here (docs/glossary.md). It costs
    one copy of the trainable weights per step (all of them for full fine-tuning, the adapters' under LoRA)."""
    change = torch.stack([torch.linalg.vector_norm((p.detach() - s).float()) for p, s in zip(params, start)])
    size = torch.stack([torch.linalg.vector_norm(s.float()) for s in start])
    norm, total = torch.linalg.vector_norm(change), torch.linalg.vector_norm(size)
    return {"optim/update_norm": float(norm), "optim/update_rel": float(norm / total.clamp(min=1e-12))}


def optimiser_step(trainer: Trainer, minibatch: RolloutBatch, state: TrainState, *,
                   usable: bool = True) -> tuple[dict[str, float], torch.Tensor]:
    """One optimiser step on a mini-batch, accumulated over micro-batches (`accumulate_gradient`).

    The step is skipped (no weight, optimiser or schedule change; `optim/skipped` 1, no credit) when the
    current log-probs, the loss or the gradient are non-finite, when the gradient norm exceeds
    `train.max_grad_norm`, or when `usable` is False. Returns the metrics and the mini-batch's per-token
    credit `-rows * dLoss/dlogp`, (rows, T).
    """
    config = trainer.config
    metrics, credit, good = accumulate_gradient(trainer, minibatch, usable=usable)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    if good:
        norm = torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip or math.inf)
        metrics["grad_norm"] = float(norm)
        bound = config.train.max_grad_norm
        good = bool(torch.isfinite(norm)) and (bound is None or float(norm) <= bound)
    if good:
        trainer.optimizer.step()
        trainer.scheduler.step()
    else:
        state.skipped_steps += 1
        credit.zero_()
    trainer.optimizer.zero_grad(set_to_none=True)
    metrics["optim/skipped"] = float(not good)
    return metrics, credit


def accumulate_gradient(trainer: Trainer, minibatch: RolloutBatch, *,
                        usable: bool = True) -> tuple[dict[str, float], torch.Tensor, bool]:
    """The gradient of the method's loss on a mini-batch, accumulated over micro-batches into the trainable
    parameters' `.grad` (with the loss's whole-mini-batch normalisers, so it equals one pass's gradient).

    Returns the loss's metrics, the per-token credit `-rows * dLoss/dlogp` (rows, T), and whether every
    log-prob and the loss were finite (and `usable`); when not, the accumulation stopped there.
    """
    denominators = trainer.method.loss.normalisers(minibatch.loss_mask)
    metrics: dict[str, float] = {}
    credit = torch.zeros_like(minibatch.old_logp)  # (rows, T)
    entropy_sum, good = 0.0, usable
    for rows in trainer.micro_batches(minibatch.prompt_mask, minibatch.response_mask) if usable else []:
        rows = rows.to(minibatch.response_ids.device)
        part = minibatch.select(rows)
        logp, stats = policy_logprobs(trainer.model, part.prompt_ids, part.prompt_mask, part.response_ids,
                                      part.response_mask, statistics=("entropy",) if trainer.on_policy else (),
                                      **trainer.scoring)
        logp = logp.float()
        if not finite_on(part.response_mask, logp, *stats.values()):
            good = False
            break
        if trainer.on_policy:  # this pass is the behaviour policy's
            part = part.replace(old_logp=torch.where(part.response_mask, logp.detach(), 0.0))
            entropy_sum += float(stats["entropy"].float()[part.response_mask].sum())
        logp.retain_grad()  # the credit diagnostics read dLoss/dlogp from the backward pass taken anyway
        out = trainer.method.policy_loss(logp, part, **denominators)
        if not torch.isfinite(out.loss):
            good = False
            break
        out.loss.backward()
        if logp.grad is not None:
            credit[rows] = -minibatch.size * logp.grad
        weight = part.size / minibatch.size
        for key, value in out.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + weight * value
    if trainer.on_policy and good:
        metrics["entropy/mean"] = entropy_sum / max(1, int(minibatch.response_mask.sum()))
    return metrics, credit, good


# ------------------------------------------------------------------------------------------- records
def step_record(trainer: Trainer, state: TrainState, rollout: Rollout, batch: RolloutBatch, credit: torch.Tensor,
                credit_metrics: dict, update_metrics: dict) -> dict:
    lengths = batch.lengths.float()
    record = {
        "step": state.step,
        "rollout_tokens": state.rollout_tokens,
        "wall_s": state.wall_s,
        "lr": trainer.scheduler.get_last_lr()[0],
        "reward/mean": float(rollout.rewards.mean()),
        "reward/accuracy": sum(v.correct for v in rollout.verdicts) / len(rollout.verdicts),
        "rollout/tokens": rollout.generated_tokens,
        "rollout/truncated_share": float(rollout.completions.truncated.float().mean()),
        "response/length_mean": float(lengths.mean()),
        "optim/skipped_total": state.skipped_steps,
    }
    record.update(reward_terms(rollout.verdicts))
    if batch.entropy is not None:  # else the on-policy update logged it
        record["entropy/mean"] = float(batch.entropy[batch.response_mask].mean())
    if trainer.task.checks_steps:
        correct = [v for v in rollout.verdicts if v.correct]
        lucky = sum(v.first_wrong_step is not None for v in correct)
        record["verify/lucky_share"] = lucky / len(correct) if correct else 0.0
        precision = blame_precision(credit, batch.response_mask, batch.blame_start, failed_rows(batch))
        if precision is not None:
            record["credit/blame_precision"] = precision
    record.update(rollout.metrics)
    record.update(credit_metrics)
    record.update(update_metrics)
    return record


def reward_terms(verdicts: list[Verdict]) -> dict[str, float]:
    """Each custom reward function's mean and standard deviation over a step's responses that it gave a value,
    under TRL's names (`rewards/<name>/mean`, `rewards/<name>/std`: Bessel-corrected, as TRL's `nanstd`; left out
    below two values)."""
    values: dict[str, list[float]] = {}
    for verdict in verdicts:
        for name, value in verdict.terms:
            values.setdefault(name, [])
            if value is not None:
                values[name].append(value)
    out = {}
    for name, xs in values.items():
        if xs:
            out[f"rewards/{name}/mean"] = statistics.fmean(xs)
        if len(xs) > 1:
            out[f"rewards/{name}/std"] = statistics.stdev(xs)
    return out


def log_samples(trainer: Trainer, step: int, rollout: Rollout, batch: RolloutBatch, credit: torch.Tensor,
                columns: dict[str, list] | None = None) -> None:
    """A few responses per step with their rewards, per-token advantages and the credit the update gave, and the
    columns reward functions logged (`log_extra`) where they hold one value per row of the step's rollout."""
    tokenizer = trainer.tokenizer
    per_row = {name: values for name, values in (columns or {}).items() if len(values) == batch.size}
    for row in range(min(trainer.config.train.log_samples, batch.size)):
        n = int(batch.lengths[row])
        ids = batch.response_ids[row, :n].tolist()
        verdict = rollout.verdicts[row]
        trainer.run.append(trainer.run.samples_file, {
            "step": step,
            "prompt": rollout.problems[row].prompt,
            "response": rollout.completions.texts[row],
            "reward": float(rollout.rewards[row]),
            "correct": verdict.correct,
            "first_wrong_step": verdict.first_wrong_step,
            "ids": ids,
            "tokens": tokenizer.convert_ids_to_tokens(ids),
            "blame_start": None if batch.blame_start is None else int(batch.blame_start[row]),
            "advantage": [round(x, 4) for x in batch.advantages[row, :n].tolist()],
            "credit": [round(x, 5) for x in credit[row, :n].tolist()],
            "loss_mask": batch.loss_mask[row, :n].tolist(),
            **({"extra": {name: plain(values[row]) for name, values in per_row.items()}} if per_row else {}),
        })


def plain(value: object) -> object:
    """A logged value as JSON holds it: a string, number, bool or None as it is, anything else as its `str`."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def report_eval(trainer: Trainer, problems, state: TrainState, trackers: Trackers, progress: TrainProgress, *,
                final: bool = False, token_checkpoint: int | None = None) -> dict:
    """Evaluate (`record_eval`) and report the result to the trackers and the live view."""
    result = record_eval(trainer, problems, state, final=final, token_checkpoint=token_checkpoint)
    trackers.log_eval(result, state.step)
    progress.evaluated(state.step, result)
    return result


def record_eval(trainer: Trainer, problems, state: TrainState, *, final: bool = False,
                token_checkpoint: int | None = None) -> dict:
    """Evaluate the policy on the held-out `problems` and append the result to metrics.jsonl; the run's last
    evaluation (`final`) samples `eval.final_samples` responses per problem of `eval.final_sample_problems` where
    set, and again at each of `eval.final_temperatures` (metrics keyed `@t<temperature>`, `evaluate.at_temperature`).

    The record holds `step`, `rollout_tokens`, `wall_s` and `eval` (the metrics), and `token_checkpoint` (an
    int) where the evaluation serves token checkpoints of `train.eval_every_tokens`: the largest the step
    reached (`token_checkpoint_reached`). It serves every checkpoint above the previous such record's too, so
    the evaluation at checkpoint c is the first record whose `token_checkpoint` is at least c."""
    config = trainer.config
    if trainer.sampling_keys is not None:
        trainer.sampling_keys.begin(EVAL, state.step)
    follow_rewards(trainer, state.step)
    setting = config.eval
    if final:
        setting = setting.model_copy(update={
            "samples": setting.final_samples or setting.samples,
            "sample_problems": setting.final_sample_problems or setting.sample_problems})
    seed = config.train.seed + 1_000_003 * (state.step + 1)

    def evaluate(at: EvalConfig) -> dict:
        return evaluate_policy(trainer.backend, trainer.task, problems, at, max_new_tokens=config.rollout.max_new_tokens,
                               seed=seed, reward_errors=config.rollout.reward_errors)

    result = evaluate(setting)
    for temperature in setting.final_temperatures if final and setting.samples else ():
        more = at_temperature(evaluate(setting.model_copy(update={"greedy": False, "temperature": temperature})),
                              temperature)
        for difficulty, metrics in more.pop("by_difficulty").items():
            result["by_difficulty"][difficulty] |= metrics
        result |= more
    record = {"step": state.step, "rollout_tokens": state.rollout_tokens, "wall_s": state.wall_s, "eval": result}
    if token_checkpoint is not None:
        record["token_checkpoint"] = token_checkpoint
    trainer.run.append(trainer.run.metrics_file, record)
    return result


def finish(trainer: Trainer, state: TrainState) -> dict:
    from credo.plots import learning_curve

    records = trainer.run.records()
    evals = [r for r in records if "eval" in r]
    precisions = [r["credit/blame_precision"] for r in records if "credit/blame_precision" in r]
    updates = [r["optim/update_norm"] for r in records if "optim/update_norm" in r]
    summary = {
        "method": trainer.config.method,
        "task": trainer.task.name,
        "seed": trainer.config.train.seed,
        "steps": state.step,
        "rollout_tokens": state.rollout_tokens,
        "wall_s": state.wall_s,
        "skipped_steps": state.skipped_steps,
        "eval_start": evals[0]["eval"],
        "eval_end": evals[-1]["eval"],
        "blame_precision": sum(precisions) / len(precisions) if precisions else None,
        "update_norm": sum(updates) / len(updates) if updates else None,
        "device": device_name(trainer.device),
    }
    with atomic_directory(trainer.run.model_dir) as tmp:
        export_model(trainer.model, trainer.tokenizer, tmp)
    write_json_atomic(trainer.run.root / "summary.json", summary)
    learning_curve(records, trainer.run.plots / "learning_curve.png", title=f"{trainer.config.method} on {trainer.task.name}")
    return summary

