"""Other engines' conventions as presets of credo's switches, shared by the TRL and verl integrations.

A preset lists, per class of estimator or loss, the switches that make a credo method compute what the engine's
own implementation computes (README "Reproducing verl and TRL exactly"; the tests compare through the engines'
code). Switches apply to a method whose estimator or loss is an instance of the class; `"credo"` changes
nothing. What a switch cannot express is handled by the integration and documented there (verl's groups of one
row: `credo.integrations.verl.single_row_advantages`; TRL's `norm_len = max_completion_length`, read from its
`GRPOConfig` in `credo.integrations.trl.resolve_method`).

TRL 1.16 `GRPOTrainer` (`trl/trainer/grpo_trainer.py`): `advantages / (std_rewards + 1e-4)` with the sample
std; `loss_type="grpo"` takes `.mean()` over all B rows (rows without a loss token count) and the log-ratio
goes into `exp` unclamped.

verl 0.9.1 (`verl/trainer/ppo/core_algos.py`):
- `compute_grpo_outcome_advantage`: `(r - mean) / (torch.std(scores) + epsilon)`, `torch.std`'s default
  correction 1 (the sample std), `epsilon=1e-6`; `norm_adv_by_std_in_grpo=False` subtracts the mean only.
- `compute_policy_loss_vanilla`: `torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)` before `exp`;
  dual clip `torch.min(-advantages * clip_ratio_c, ...)` where `advantages < 0`, `clip_ratio_c` default 3.0.
- `agg_loss`: seq modes divide the row sum by `global_batch_size`, which verl's trainer always passes
  (`verl/workers/utils/losses.py` `ppo_loss`: `global_batch_size = ppo_mini_batch_size * rollout.n`, every
  row of the mini-batch): rows without a loss token count. (Called without it, `agg_loss` leaves them out.)
- `seq-mean-token-sum-norm` divides by `loss_scale_factor`, else by `loss_mask.shape[-1]`: the padded width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from credo.checks import check_choice
from credo.credit import GroupAdvantage
from credo.losses import ClipLoss, ClippedLoss, PolicyLoss
from credo.methods import Method

PRESETS: dict[str, tuple[tuple[type, Mapping[str, Any]], ...]] = {
    "credo": (),
    "trl": (
        (GroupAdvantage, {"std_ddof": 1, "eps": 1e-4}),
        (PolicyLoss, {"empty_rows": "count"}),
        (ClippedLoss, {"log_ratio_clamp": None}),
    ),
    "verl": (
        (GroupAdvantage, {"std_ddof": 1, "eps": 1e-6}),
        (PolicyLoss, {"empty_rows": "count", "norm_len": None}),
        (ClipLoss, {"dual_clip": 3.0, "log_ratio_clamp": 20.0}),  # verl's vanilla loss (not its GSPO loss)
    ),
}
"""Convention name -> (class, switches) pairs, applied in order to a method's estimator and loss."""


def convention_switches(method: Method, conventions: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(estimator switches, loss switches)` of the preset `conventions` for `method` (see `PRESETS`)."""
    check_choice("credo.integrations", "conventions", conventions, tuple(PRESETS))
    estimator: dict[str, Any] = {}
    loss: dict[str, Any] = {}
    for cls, switches in PRESETS[conventions]:
        if isinstance(method.estimator, cls):
            estimator.update(switches)
        if isinstance(method.loss, cls):
            loss.update(switches)
    return estimator, loss


__all__ = ["PRESETS", "convention_switches"]
