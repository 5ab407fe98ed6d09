"""The PPO clipped surrogate shared by the ratio losses (`ClippedSurrogate`), and PPO's per-token ratio
(`PPOClipLoss`: GRPO, Dr. GRPO, DAPO)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_range
from credo.losses.base import Importance, PolicyLoss, masked_mean
from credo.losses.reinforce import ReinforceLoss


@dataclass(frozen=True, kw_only=True)
class ClippedSurrogate(PolicyLoss):
    """The PPO clipped surrogate over an importance ratio that subclasses build.

    `l_t = w_t * max(-A_t rho_t, -A_t clip(rho_t, 1 - clip_low, 1 + clip_high))`; with `dual_clip = c`,
    tokens with `A_t < 0` take `min(l_t, -c A_t)` (Ye et al. 2019, arXiv 1912.09729; verl's default c = 3).
    """

    conventions: ClassVar[Mapping[str, Mapping[str, Any]]] = {"trl": {"log_ratio_clamp": None}}

    clip_low: float = 0.2
    """eps_low: the ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """eps_high: clipped above at 1 + clip_high (DAPO's clip-higher: 0.28)."""
    dual_clip: float | None = None
    """Dual-clip bound c > 1 for negative advantages (verl: 3.0); None disables it."""
    log_ratio_clamp: float | None = 20.0
    """Clamp the log-ratio to +-this before exp (verl: 20); None: no clamp."""
    on_policy_inert: ClassVar[str] = "has a ratio of 1 and a clip that never binds"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        check_range(name, "clip_low", self.clip_low, 0.0, 1.0, high_open=True)
        check_range(name, "clip_high", self.clip_high, 0.0)
        if self.dual_clip is not None:
            check_range(name, "dual_clip", self.dual_clip, 1.0, low_open=True)
        if self.log_ratio_clamp is not None:
            check_range(name, "log_ratio_clamp", self.log_ratio_clamp, 0.0, low_open=True)

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        """The importance ratio this loss clips (with its gradient path), and what else shapes the surrogate."""
        raise NotImplementedError

    def on_policy(self) -> PolicyLoss:
        """With every ratio 1 (`logp = old_logp`, and a ratio that is 1 there) no clip, dual clip or clamp binds:
        the same loss with those switches at their defaults."""
        own = [f for f in dataclasses.fields(ClippedSurrogate) if f.name not in self.shared_switches()]
        return dataclasses.replace(self, **{f.name: f.default for f in own})

    def token_loss(self, logp: Tensor, batch: RolloutBatch) -> tuple[Tensor, dict[str, float]]:
        imp = self.importance(logp, batch)
        log_rho = imp.log_ratio
        if self.log_ratio_clamp is not None:
            log_rho = log_rho.clamp(-self.log_ratio_clamp, self.log_ratio_clamp)
        ratio = torch.exp(log_rho)
        adv = batch.advantages
        low, high = 1.0 - self.clip_low, 1.0 + self.clip_high
        loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(low, high))
        mask = batch.loss_mask
        metrics = imp.metrics
        with torch.no_grad():
            r = ratio.detach()
            out_low, out_high = (r < low) & (adv < 0), (r > high) & (adv > 0)
            if imp.own_log_ratio is not None:
                own = torch.exp(imp.own_log_ratio.detach())
                out_low, out_high = out_low | ((own < low) & (adv < 0)), out_high | ((own > high) & (adv > 0))
            metrics["clip/low_frac"] = masked_mean(out_low.float(), mask)
            metrics["clip/high_frac"] = masked_mean(out_high.float(), mask)
            metrics["ratio/mean"] = masked_mean(r, mask)
            metrics["ratio/max"] = float(r[mask].max()) if mask.any() else 1.0
        if imp.own_log_ratio is not None:
            # PPO's per-token trust region on the token's own ratio r_t = rho_t / H_t (H_t = sg(rho_t / r_t)):
            # -A H_t clip(r_t) is constant in logp_t once r_t leaves the range in A's direction, so the
            # maximum sends no gradient there, whatever the history.
            own = imp.own_log_ratio
            history = torch.exp((log_rho - own).detach())
            loss = torch.maximum(loss, -adv * history * torch.exp(own).clamp(low, high))
        if self.dual_clip is not None:
            bound = -adv * self.dual_clip
            with torch.no_grad():
                metrics["clip/dual_frac"] = masked_mean(((loss > bound) & (adv < 0)).float(), mask)
            loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
        if imp.weight is not None:
            loss = loss * imp.weight
        return loss, metrics


@dataclass(frozen=True, kw_only=True)
class PPOClipLoss(ClippedSurrogate):
    """GRPO (arXiv 2402.03300), Dr. GRPO (2503.20783), DAPO (2503.14476): per-token ratio `pi/pi_old`."""

    conventions: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "verl": {"dual_clip": 3.0, "log_ratio_clamp": 20.0},  # verl's vanilla loss (not its GSPO loss)
    }

    on_policy_inert: ClassVar[str] = "has a ratio of 1 and a clip that never binds (REINFORCE's gradient)"

    def importance(self, logp: Tensor, batch: RolloutBatch) -> Importance:
        return Importance(logp - batch.old_logp)

    def on_policy(self) -> PolicyLoss:
        """On policy `-A rho_t` with `rho_t = exp(logp_t - sg(logp_t)) = 1` has REINFORCE's gradient `-A grad logp_t`
        and no clip binds: `ReinforceLoss` with the same aggregation and KL penalty (SRPO's ablation `srpo_clip`
        is then `srpo`, and `reinforce` is `grpo`)."""
        return ReinforceLoss(**self.shared_switches())
