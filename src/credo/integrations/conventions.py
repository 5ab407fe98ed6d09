"""Other engines' conventions as presets of credo's switches, shared by the TRL and verl integrations.

Each estimator and loss class declares, in its `conventions` class attribute, the switches that make it compute
what the engine's own implementation computes (docs/methods.md "Reproducing verl and TRL exactly"; the tests compare
through the engines' code); a class adds to its bases' declarations, and `"credo"` changes nothing. The
engines' code these declarations follow is quoted below. What a switch cannot express is handled by the
integration and documented there (verl's groups of one row: `credo.integrations.verl.single_row_advantages`;
TRL's `norm_len = max_completion_length`, read from its `GRPOConfig` in `credo.integrations.trl.resolve_method`).

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

from typing import Any

from credo.checks import check_choice
from credo.methods import Method

CONVENTIONS = ("credo", "trl", "verl")
"""The convention presets: "credo" changes nothing; "trl" and "verl" are the switches each estimator and
loss class declares in its `conventions` (class attribute, collected from its bases down)."""


def convention_switches(method: Method, conventions: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(estimator switches, loss switches)` that make `method` compute what the engine `conventions` names
    computes, as its estimator's and loss's classes declare them."""
    check_choice("credo.integrations", "conventions", conventions, CONVENTIONS)
    return declared(method.estimator, conventions), declared(method.loss, conventions)


def declared(obj: Any, conventions: str) -> dict[str, Any]:
    """The switches `type(obj)` and its bases declare for `conventions` (a subclass's win)."""
    switches: dict[str, Any] = {}
    for klass in reversed(type(obj).__mro__):
        switches.update(vars(klass).get("conventions", {}).get(conventions, {}))
    return switches


__all__ = ["CONVENTIONS", "convention_switches"]
