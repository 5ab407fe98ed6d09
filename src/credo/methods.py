"""The methods credo implements: each a named combination of sampler, credit estimator and policy loss.

`get_method("s_trace", loss={"lam": 0.9})` is all a user (or a config's `method:` line) needs. Every
method's defaults live here and only here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from credo.batch import RolloutBatch
from credo.credit import EntropySelection, GroupAdvantage, OracleBlameAdvantage, ResetAdvantage, RevisionAdvantage
from credo.credit.base import CreditEstimator, Metrics
from credo.losses import ClipLoss, LambdaLoss, LossOutput, PolicyLoss, ReinforceLoss, TraceLoss
from credo.registry import Registry

SAMPLERS = ("groups", "resets", "revisions")


@dataclass(frozen=True)
class Method:
    """A credit-assignment method: what the sampler draws, how credit is computed, how the loss is formed."""

    name: str
    family: str
    """baseline | trace | reset | revision | oracle."""
    paper: str
    """arXiv id of the paper the method comes from."""
    changes: str
    """What the method changes with respect to GRPO, in one sentence."""
    sampler: str
    """groups (i.i.d. groups) | resets (thought MDP with resets) | revisions (counterfactual revisions)."""
    estimator: CreditEstimator
    loss: PolicyLoss
    localiser: str | None = None
    """For reset methods: which first-wrong-thought localiser the sampler uses (random | self | oracle)."""

    def credit(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        """Run the credit estimator once per rollout batch (before mini-batches)."""
        return self.estimator(batch)

    def policy_loss(self, logp: Any, batch: RolloutBatch, **denominators: float) -> LossOutput:
        """The policy loss of current log-probs `logp` (B, T) on a credited (mini-)batch."""
        return self.loss(logp, batch, **denominators)

    def with_overrides(
        self, *, estimator: Mapping[str, Any] | None = None, loss: Mapping[str, Any] | None = None
    ) -> Method:
        """A copy with some estimator / loss switches changed; an unknown switch is a ValueError."""
        return dataclasses.replace(
            self,
            estimator=_override(self.estimator, estimator or {}, f"{self.name}.estimator"),
            loss=_override(self.loss, loss or {}, f"{self.name}.loss"),
        )


def _override(obj: Any, changes: Mapping[str, Any], where: str) -> Any:
    allowed = [f.name for f in dataclasses.fields(obj)]
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown switch(es) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return dataclasses.replace(obj, **changes)


def settings(obj: Any) -> str:
    """`ClassName(field=value, ...)` with only the fields that differ from the class defaults."""
    changed = [
        f"{f.name}={getattr(obj, f.name)!r}"
        for f in dataclasses.fields(obj)
        if f.default is not dataclasses.MISSING and getattr(obj, f.name) != f.default
    ]
    return f"{type(obj).__name__}({', '.join(changed)})"


METHODS: Registry[Method] = Registry("method")


def get_method(
    name: str, *, estimator: Mapping[str, Any] | None = None, loss: Mapping[str, Any] | None = None
) -> Method:
    """The registered method `name`, with optional switch overrides."""
    return METHODS.get(name).with_overrides(estimator=estimator, loss=loss)


def _add(method: Method) -> None:
    METHODS.add(method.name, method)


_GSPO_CLIP = {"kernel": "uniform", "clip": "combined", "clip_low": 3e-4, "clip_high": 4e-4}

_add(Method(
    "grpo", "baseline", "2402.03300",
    "the reference: every token of a response gets its group-normalised reward; PPO clip 0.2",
    "groups", GroupAdvantage(), ClipLoss(),
))
_add(Method(
    "dr_grpo", "baseline", "2503.20783",
    "no std scaling; token sums over a fixed length, so no length or difficulty bias",
    "groups", GroupAdvantage(scale="none"), ClipLoss(agg="seq_mean_token_sum_norm"),
))
_add(Method(
    "dapo", "baseline", "2503.14476",
    "clip-higher (0.2 / 0.28) and a token mean over the batch (dynamic sampling: a sampler option)",
    "groups", GroupAdvantage(), ClipLoss(clip_high=0.28, agg="token_mean"),
))
_add(Method(
    "gspo", "baseline", "2507.18071",
    "one sequence-level ratio (geometric mean of token ratios) per response, clip 3e-4 / 4e-4",
    "groups", GroupAdvantage(), TraceLoss(**_GSPO_CLIP),
))
_add(Method(
    "reinforce", "baseline", "2402.03300",
    "no ratio and no clip: -A * logp with the group baseline (the SRPO loss on fresh groups)",
    "groups", GroupAdvantage(), ReinforceLoss(),
))
_add(Method(
    "grpo_lambda", "trace", "2510.00194",
    "lambda-returns: each token's ratio is traced through the earlier tokens' log-probs",
    "groups", GroupAdvantage(), LambdaLoss(),
))
_add(Method(
    "p_trace", "trace", "2605.05965",
    "each token's ratio carries a bounded, decayed mean of the earlier ratios; own and combined ratio clipped",
    "groups", GroupAdvantage(), TraceLoss(lam=0.95, clip_high=0.28),
))
_add(Method(
    "s_trace", "trace", "2605.05965",
    "P-trace whose trace keeps only the top-20% entropy tokens' ratios (the others count as zeros)",
    "groups", EntropySelection(), TraceLoss(lam=0.95, clip_high=0.28),
))
_add(Method(
    "rrpo", "reset", "2605.25507",
    "resets a failed rollout to a random thought; continuations train on their suffix only",
    "resets", ResetAdvantage(), ReinforceLoss(empty_rows="count"), localiser="random",
))
_add(Method(
    "srpo", "reset", "2605.25507",
    "resets a failed rollout to the first wrong thought, localised by the policy itself",
    "resets", ResetAdvantage(), ReinforceLoss(empty_rows="count"), localiser="self",
))
_add(Method(
    "srpo_clip", "reset", "2605.25507",
    "SRPO's ablation: the same reset groups and masks with GRPO's PPO-clip loss instead of REINFORCE",
    "resets", ResetAdvantage(), ClipLoss(empty_rows="count"), localiser="self",
))
_add(Method(
    "ibpo", "revision", "2605.16302",
    "failures the policy can repair from a sibling are penalised less; their edits are blamed, never credited",
    "revisions", RevisionAdvantage(), TraceLoss(**_GSPO_CLIP),
))
_add(Method(
    "oracle_blame", "oracle", "credo",
    "the yardstick: GRPO whose failures are blamed only from their first wrong step (tasks with a step checker)",
    "groups", OracleBlameAdvantage(), ClipLoss(),
))
_add(Method(
    "ibpo_clip", "revision", "2605.16302",
    "IBPO's switch: the same shaped rewards and edited-token masks with GRPO's PPO-clip loss instead of GSPO",
    "revisions", RevisionAdvantage(), ClipLoss(),
))
