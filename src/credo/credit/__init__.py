"""Credit estimators: from rewards (and sampler records) to per-token advantages and masks, no model.

See `credo.methods` (`METHODS`) for the named methods that pair an estimator with a loss.
"""

from credo.credit.base import CreditEstimator, Metrics
from credo.credit.groups import GroupAdvantage, failed_rows, group_advantages
from credo.credit.oracle import OracleBlameAdvantage, StepOracleAdvantage, blame_mask, decision_advantages
from credo.credit.resets import ResetAdvantage, suffix_mask
from credo.credit.revisions import RevisionAdvantage, closest_revision, edit_distance, edit_mask, shaped_rewards
from credo.credit.traces import EntropySelection, entropy_selection

__all__ = [
    "CreditEstimator",
    "EntropySelection",
    "GroupAdvantage",
    "Metrics",
    "OracleBlameAdvantage",
    "ResetAdvantage",
    "RevisionAdvantage",
    "StepOracleAdvantage",
    "blame_mask",
    "closest_revision",
    "decision_advantages",
    "edit_distance",
    "edit_mask",
    "entropy_selection",
    "failed_rows",
    "group_advantages",
    "shaped_rewards",
    "suffix_mask",
]
