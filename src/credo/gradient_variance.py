"""The variance of a method's policy-gradient estimate, measured on common batches.

IBPO's title claim is a policy gradient of lower variance; a credit method can also add variance (a trace that
carries ratios through many tokens, a noisy localiser). For one fixed policy and one fixed set of prompts,
`gradient_draws` draws R rollout batches with the method's own sampler (the same prompts each time, the groups
and any resets, revisions or continuations resampled), credits each, and takes the gradient `g_r` of the
method's loss on the whole batch at the sampling policy (importance ratio 1, one mini-batch), over all trainable
parameters. `spread` then gives, with ḡ the mean of the R gradients:

    total variance    V = 1/(R-1) sum_r ||g_r - ḡ||^2
    signal            S = ||ḡ||^2 - V/R          (an unbiased estimate of ||E g||^2)
    relative variance V / S                      (scale-free: methods normalise their losses differently),
                                                 with its jackknife standard error over the draws
    mean cosine       mean over r != s of cos(g_r, g_s)

Lower relative variance and higher cosine mean a steadier estimate of the same direction. Draw r of every
method samples with common random numbers keyed by r (`credo.rollout.crn`), so where two methods' samplers
draw alike (the first groups of every i.i.d., reset or revision sampler) they start from the same responses.
"""

from __future__ import annotations

import math
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from torch import Tensor

from credo.checkpoint import RunDirectory
from credo.config import RunConfig
from credo.rollout.groups import ProblemStream
from credo.train import accumulate_gradient, behaviour_batch, build_trainer, sample_rollout


def gradient_draws(config: RunConfig, draws: int) -> tuple[Tensor, dict[str, float]]:
    """(draws, parameters) gradients of `config`'s method on its policy and its first `prompts_per_step` training
    problems (seed `train.seed`), one per resampled rollout batch, and the draws' mean reward and tokens."""
    if not config.rollout.common_random_numbers:
        config = config.model_copy(update={"rollout": config.rollout.model_copy(update={"common_random_numbers": True})})
    with TemporaryDirectory() as scratch:
        trainer = build_trainer(config, RunDirectory(Path(scratch)))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    grads, rewards, tokens = [], 0.0, 0
    for draw in range(draws):
        rollout = sample_rollout(trainer, ProblemStream(trainer.task, config.train.seed), step=draw)
        batch, finite = behaviour_batch(trainer, rollout)
        batch, _ = trainer.method.credit(batch)
        _, _, good = accumulate_gradient(trainer, batch, usable=finite)
        if not good:
            raise ValueError(f"{config.method}: draw {draw} gave a non-finite log-prob or loss; no gradient to measure")
        grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]))
        trainer.optimizer.zero_grad(set_to_none=True)
        rewards += float(rollout.rewards.mean())
        tokens += rollout.generated_tokens
    return torch.stack(grads).double(), {"reward_mean": rewards / draws, "tokens_per_draw": tokens / draws}


def spread(grads: Tensor) -> dict[str, float]:
    """Total variance, signal, relative variance (with its jackknife standard error), mean pairwise cosine and mean
    norm of (R, D) gradients (R >= 2; the standard error needs R >= 3)."""
    draws = grads.shape[0]
    if draws < 2:
        raise ValueError("the spread of a gradient estimate needs at least 2 draws")
    variance, signal = _variance_and_signal(grads)
    units = grads / grads.norm(dim=1, keepdim=True).clamp(min=1e-30)
    total = units.sum(dim=0)
    cosine = (float(total @ total) - draws) / (draws * (draws - 1))
    return {
        "draws": draws,
        "grad_norm_mean": float(grads.norm(dim=1).mean()),
        "total_variance": variance,
        "signal": signal,
        "relative_variance": _ratio(variance, signal),
        "relative_variance_se": _jackknife_se(grads) if draws >= 3 else math.nan,
        "mean_cosine": cosine,
    }


def _variance_and_signal(grads: Tensor) -> tuple[float, float]:
    draws = grads.shape[0]
    mean = grads.mean(dim=0)
    variance = float(((grads - mean) ** 2).sum()) / (draws - 1)
    return variance, float(mean @ mean) - variance / draws


def _ratio(variance: float, signal: float) -> float:
    return variance / signal if signal > 0 else math.inf


def _jackknife_se(grads: Tensor) -> float:
    """Jackknife standard error of the relative variance: sqrt((R-1)/R * sum_i (r_(i) - mean r_(.))^2), r_(i) the
    estimate without draw i."""
    draws = grads.shape[0]
    keep = torch.ones(draws, dtype=torch.bool)
    leave_one_out = []
    for i in range(draws):
        keep[i] = False
        leave_one_out.append(_ratio(*_variance_and_signal(grads[keep])))
        keep[i] = True
    if not all(math.isfinite(r) for r in leave_one_out):
        return math.inf
    mean = sum(leave_one_out) / draws
    return math.sqrt((draws - 1) / draws * sum((r - mean) ** 2 for r in leave_one_out))
