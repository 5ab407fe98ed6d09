"""The variance of a method's policy-gradient estimate, measured on common batches.

IBPO's title claim is a policy gradient of lower variance; a credit method can also add variance (a trace that
carries ratios through many tokens, a noisy localiser). For one fixed policy and one fixed set of prompts,
`gradient_draws` draws R rollout batches with the method's own sampler (the same prompts each time, the groups
and any resets, revisions or continuations resampled), credits each, and takes the gradient `g_r` of the
method's loss on the whole batch at the sampling policy (importance ratio 1, one mini-batch), over all trainable
parameters. `spread` then gives, from their Gram matrix, with ḡ the mean of the R gradients:

    total variance    V = 1/(R-1) sum_r ||g_r - ḡ||^2
    signal            S = ||ḡ||^2 - V/R          (an unbiased estimate of ||E g||^2)
    relative variance V / S                      (scale-free: methods normalise their losses differently),
                                                 with its jackknife standard error over the draws
    mean cosine       mean over r != s of cos(g_r, g_s)

Lower relative variance and higher cosine mean a steadier estimate of the same direction. Draw r of every
method samples with common random numbers keyed by r (`credo.rollout.crn`), so where two methods' samplers
draw alike (the first groups of every i.i.d., reset or revision sampler) they start from the same responses, and
`paired_ratio` compares two methods' relative variances draw by draw (a jackknife over the draws of both).

At ratio 1 a trace method's gradient is its base's (an S-trace's selection and a GRPO-lambda trace act only where
the current policy has moved off the behaviour policy). `after_steps=k` measures the gradient a method takes off
policy instead: the credited batch is cut into the method's `optim.minibatches` mini-batches (in an order keyed by
the draw), `k` optimiser steps are taken on the first `k`, and the measured gradient is the loss's on mini-batch
`k + 1` at the moved policy; the weights, optimiser and schedule are restored before the next draw. Compare such
gradients only between configs with the same number of mini-batches (the mini-batch's size sets its noise).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from torch import Tensor

from credo.checkpoint import RunDirectory, TrainState
from credo.config import RunConfig
from credo.rollout.groups import ProblemStream
from credo.run_setup import Trainer, build_trainer
from credo.train import accumulate_gradient, behaviour_batch, optimiser_step, sample_rollout


def gradient_draws(config: RunConfig, draws: int, after_steps: int = 0) -> tuple[Tensor, dict[str, float]]:
    """(draws, parameters) gradients of `config`'s method on its policy and its first `prompts_per_step` training
    problems (seed `train.seed`), one per resampled rollout batch, and the draws' mean reward and tokens.

    `after_steps=0`: the whole batch's gradient at the sampling policy. `after_steps=k` (1 <= k < minibatches): the
    gradient on mini-batch k + 1 after optimiser steps on the first k (see the module docstring)."""
    check_after_steps(config, after_steps)
    minibatches = config.optim.minibatches
    if not config.rollout.common_random_numbers:
        config = config.model_copy(update={"rollout": config.rollout.model_copy(update={"common_random_numbers": True})})
    with TemporaryDirectory() as scratch:
        trainer = build_trainer(config, RunDirectory(Path(scratch)))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    start = _training_state(trainer)
    grads, rewards, tokens, moved = [], 0.0, 0, 0.0
    for draw in range(draws):
        rollout = sample_rollout(trainer, ProblemStream(trainer.task, config.train.seed), step=draw)
        batch, finite = behaviour_batch(trainer, rollout)
        batch, _ = trainer.method.credit(batch)
        if after_steps:
            order = torch.randperm(batch.size, generator=torch.Generator().manual_seed(draw))
            parts = [rows.to(batch.response_ids.device) for rows in order.chunk(minibatches)]
            for rows in parts[:after_steps]:
                optimiser_step(trainer, batch.select(rows), TrainState(), usable=finite)
            moved += float(torch.cat([(p.detach() - p0).flatten() for p, p0 in zip(params, start["params"])]).norm())
            batch = batch.select(parts[after_steps])
        _, _, good = accumulate_gradient(trainer, batch, usable=finite)
        if not good:
            raise ValueError(f"{config.method}: draw {draw} gave a non-finite log-prob or loss; no gradient to measure")
        grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]))
        trainer.optimizer.zero_grad(set_to_none=True)
        if after_steps:
            _restore(trainer, start)
        rewards += float(rollout.rewards.mean())
        tokens += rollout.generated_tokens
    extra = {"reward_mean": rewards / draws, "tokens_per_draw": tokens / draws}
    if after_steps:
        extra["after_steps"] = after_steps
        extra["weights_moved"] = moved / draws  # mean |theta_k - theta_0| before the measured mini-batch
    return torch.stack(grads).double(), extra


def check_after_steps(config: RunConfig, after_steps: int) -> None:
    """Refuse an `after_steps` that leaves no mini-batch to measure after the steps."""
    if after_steps and not 0 < after_steps < config.optim.minibatches:
        raise ValueError(f"{config.method}: --after-steps {after_steps} needs 0 < K < optim.minibatches "
                         f"({config.optim.minibatches}): the measured mini-batch must come after the steps")


def _training_state(trainer: Trainer) -> dict:
    """A copy of the trainable weights, the optimiser's and the schedule's state."""
    return {
        "params": [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad],
        "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        "scheduler": copy.deepcopy(trainer.scheduler.state_dict()),
    }


def _restore(trainer: Trainer, state: dict) -> None:
    with torch.no_grad():
        for p, saved in zip((p for p in trainer.model.parameters() if p.requires_grad), state["params"]):
            p.copy_(saved)
    trainer.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    trainer.scheduler.load_state_dict(copy.deepcopy(state["scheduler"]))


def gram_matrix(grads: Tensor) -> Tensor:
    """The (R, R) inner products of R gradients, in float64: every statistic below needs only these."""
    grads = grads.double()
    return grads @ grads.T


def spread(gram: Tensor) -> dict[str, float]:
    """Total variance, signal, relative variance (with its jackknife standard error), mean pairwise cosine and mean
    norm of R gradients from their Gram matrix (R >= 2; the standard error needs R >= 3). With G the Gram matrix,
    sum_r ||g_r - ḡ||^2 = tr G - sum G / R and ||ḡ||^2 = sum G / R^2."""
    draws = gram.shape[0]
    if draws < 2:
        raise ValueError("the spread of a gradient estimate needs at least 2 draws")
    variance, signal = _variance_and_signal(gram)
    norms = gram.diagonal().clamp(min=0).sqrt()
    cosines = gram / torch.outer(norms, norms).clamp(min=1e-300)
    return {
        "draws": draws,
        "grad_norm_mean": float(norms.mean()),
        "total_variance": variance,
        "signal": signal,
        "relative_variance": _ratio(variance, signal),
        "relative_variance_se": _jackknife_se(lambda keep: _ratio(*_variance_and_signal(gram[keep][:, keep])), draws),
        "mean_cosine": float(cosines.sum() - cosines.diagonal().sum()) / (draws * (draws - 1)),
    }


def paired_ratio(gram: Tensor, reference: Tensor) -> tuple[float, float]:
    """The ratio of two relative variances measured on the same draws (draw r of both keyed alike), with its
    jackknife standard error over the draws left out of both: pairing cancels the noise the two share."""
    if gram.shape != reference.shape:
        raise ValueError(f"paired draws need as many draws each, got {gram.shape[0]} and {reference.shape[0]}")

    def ratio(keep: Tensor) -> float:
        ours, theirs = (_ratio(*_variance_and_signal(g[keep][:, keep])) for g in (gram, reference))
        return ours / theirs if math.isfinite(ours) and math.isfinite(theirs) and theirs > 0 else math.inf

    draws = gram.shape[0]
    return ratio(torch.ones(draws, dtype=torch.bool)), _jackknife_se(ratio, draws)


def _variance_and_signal(gram: Tensor) -> tuple[float, float]:
    draws = gram.shape[0]
    total = float(gram.sum())
    variance = (float(gram.diagonal().sum()) - total / draws) / (draws - 1)
    return variance, total / draws**2 - variance / draws


def _ratio(variance: float, signal: float) -> float:
    return variance / signal if signal > 0 else math.inf


def _jackknife_se(estimate, draws: int) -> float:
    """Jackknife standard error of `estimate(keep)` (keep: a boolean mask of the draws):
    sqrt((R-1)/R * sum_i (e_(i) - mean e_(.))^2), e_(i) the estimate without draw i; NaN below 3 draws."""
    if draws < 3:
        return math.nan
    keep = torch.ones(draws, dtype=torch.bool)
    leave_one_out = []
    for i in range(draws):
        keep[i] = False
        leave_one_out.append(estimate(keep))
        keep[i] = True
    if not all(math.isfinite(r) for r in leave_one_out):
        return math.inf
    mean = sum(leave_one_out) / draws
    return math.sqrt((draws - 1) / draws * sum((r - mean) ** 2 for r in leave_one_out))
