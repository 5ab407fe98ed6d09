"""The methods credo implements: each a named combination of sampler, credit estimator and policy loss.

`get_method("s_trace", loss={"decay": 0.9})` is all a user (or a config's `method:` line) needs. The registry
`METHODS` is the one place a method is defined: its defaults live here and only here, and what it needs is
derived from its parts (`Method.needs`), so the trainer, the config's validation, `credo methods`, the demo
and the TRL and verl adapters ask the method instead of branching on its name. Adding a method is its module
(an estimator or a loss that declares the batch fields it reads and writes), one `_add(Method(...))` entry
here, and its tests.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from credo.batch import FIELD_SOURCES, RolloutBatch
from credo.credit import (
    EntropySelection,
    GroupAdvantage,
    OracleBlameAdvantage,
    ResetAdvantage,
    RevisionAdvantage,
    StepOracleAdvantage,
)
from credo.credit.base import CreditEstimator, Metrics
from credo.credit.entropy_weights import EntropyWeightedAdvantage
from credo.credit.fr3e import FirstReturnAdvantage
from credo.credit.gigpo import GiGPOAdvantage
from credo.credit.igpo import IGPOAdvantage
from credo.credit.key_tokens import KeyTokenAdvantage
from credo.credit.mt_grpo import MTGRPOAdvantage
from credo.credit.spo import SegmentAdvantage, TreeEdgeAdvantage
from credo.credit.token_baseline import OptimalTokenBaseline
from credo.credit.tree_grpo import TreeGroupAdvantage
from credo.credit.vine import VineAdvantage
from credo.logprobs import STATISTICS
from credo.losses import LambdaLoss, LossOutput, PolicyLoss, PPOClipLoss, ReinforceLoss, TraceLoss
from credo.registry import Registry
from credo.rollout.samplers import RolloutConfig, Sampler
from credo.rollout.samplers.entropy_branch import EntropyBranchSampler
from credo.rollout.samplers.fr3e import FR3ESampler
from credo.rollout.samplers.groups import GroupSampler
from credo.rollout.samplers.info_gain import InfoGainSampler
from credo.rollout.samplers.resets import ResetSampler
from credo.rollout.samplers.revisions import RevisionSampler
from credo.rollout.samplers.spo_chain import SpoChainSampler
from credo.rollout.samplers.spo_tree import SpoTreeSampler
from credo.rollout.samplers.tree import TreeSampler
from credo.rollout.samplers.vine import VineSampler

FAMILIES: dict[str, str] = {
    "baseline": "the critic-free methods the others are measured against (one credit per response)",
    "trace": "ratios traced through the earlier tokens' log-probs (eligibility traces)",
    "token": "per-token advantages from the policy's own signals or the group's token statistics (entropies, key "
             "tokens, a per-token baseline)",
    "reset": "resets of a failed rollout to a thought, continuations trained on their suffix",
    "revision": "counterfactual revisions of failed rollouts shape rewards and mask tokens",
    "value": "step values estimated by sampling continuations from the states between thoughts or segments (Monte "
             "Carlo)",
    "turn": "credit per turn of a multi-turn episode from the environment's turn rewards or states",
    "oracle": "credit from a task's step checker: the yardsticks",
}
"""The method families (`Method.family`), each in one phrase."""

BRIEF_CHARS = 50
"""The longest `Method.brief`: the overview (`credo methods`) gives each method one line."""

STEP_CHECKER_FIELDS = frozenset({"blame_start", "thought_ids", "thought_wrong"})
"""The batch fields credo's trainer fills from a task's step checker (`Task.checks_steps`)."""
ENVIRONMENT_FIELDS = frozenset({"turn_anchor", "turn_reward"})
"""The batch fields only a task's environment fills (`Task.environment`: multi-turn episodes, whose turns also fill
`STEP_CHECKER_FIELDS`, `credo.rollout.episodes.Episodes.token_fields`)."""
TRAINER_FIELDS = frozenset({"correct", "ref_logp", *STATISTICS})
"""Optional batch fields credo's trainer fills for any method (the verdicts; the behaviour policy's per-token
statistics, `credo.logprobs.STATISTICS`: entropies and sums of squared probabilities, scored before credit when
the method reads them; the frozen starting policy's log-probs when the loss has a KL penalty, `kl_beta > 0`);
`STEP_CHECKER_FIELDS` too on a task with a step checker."""


@dataclass(frozen=True)
class Method:
    """A credit-assignment method: what the sampler draws, how credit is computed, how the loss is formed.

    What a method needs is derived from its parts, never from its name: the batch fields its estimator and
    loss read (`reads`), less those its estimator writes and its sampler records, must come from whoever
    runs it (`needs`): the trainer, a task's step checker, an engine (`missing`).
    """

    name: str
    family: str
    """One of `FAMILIES`."""
    paper: str
    """arXiv id of the paper the method comes from."""
    changes: str
    """What the method changes with respect to GRPO, in one sentence."""
    brief: str = dataclasses.field(kw_only=True)
    """What it changes with respect to GRPO in a few words (at most `BRIEF_CHARS`): its line in `credo methods`."""
    sampler: Sampler
    """How rollout batches are drawn (`credo.rollout.samplers.SAMPLERS`): i.i.d. groups (`groups`), resets of
    failed rollouts (`resets`), revisions of failures (`revisions`), Monte-Carlo values of the states between
    thoughts (`vine`) or at low-probability tokens (`spo_chain`), a tree of segments (`spo_tree`),
    continuations from high-entropy tokens (`fr3e`), i.i.d. episodes each turn's information gain scored
    (`info_gain`), trees of episodes branching at turn boundaries (`tree`), or episodes branching after tool results
    where the policy's entropy rises (`entropy_branch`)."""
    estimator: CreditEstimator
    loss: PolicyLoss

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"method {self.name}: family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if not 0 < len(self.brief) <= BRIEF_CHARS:
            raise ValueError(f"method {self.name}: its brief must be 1 to {BRIEF_CHARS} characters, got {self.brief!r}")
        unknown = sorted((self.reads | self.estimator.writes | frozenset(self.sampler.records)) - FIELD_SOURCES.keys())
        if unknown:
            raise ValueError(f"method {self.name}: unknown batch field(s) {', '.join(unknown)} (credo.batch.FIELD_SOURCES)")
        unfilled = sorted(self.loss.reads - self.estimator.writes - frozenset(self.sampler.records) - TRAINER_FIELDS
                          - STEP_CHECKER_FIELDS - {"ref_logp"})
        if unfilled:
            raise ValueError(f"method {self.name}: its loss reads {', '.join(unfilled)}, which nothing fills")

    @property
    def reads(self) -> frozenset[str]:
        """The optional batch fields the method's estimator and loss read, less those its estimator writes."""
        return (self.estimator.reads | self.loss.reads) - self.estimator.writes

    @property
    def needs(self) -> frozenset[str]:
        """What the method reads that its own sampler does not record: the runner must fill it."""
        return self.reads - frozenset(self.sampler.records)

    @property
    def behaviour_statistics(self) -> frozenset[str]:
        """The behaviour policy's per-token statistics the method needs (`credo.logprobs.STATISTICS`: entropies,
        sums of squared probabilities), scored with its log-probs before credit, once per rollout batch."""
        return self.needs & frozenset(STATISTICS)

    def missing(self, available: frozenset[str] | set[str]) -> list[str]:
        """What a runner that fills `available` lacks for this method, each as "field (its source)"."""
        return [f"{field} ({FIELD_SOURCES[field]})" for field in sorted(self.needs - available)]

    def check_run(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        """A `ValueError` unless credo's trainer can run the method with these sampling options on a task that
        has a step checker (`checks_steps`) or not, and whose responses are multi-turn episodes or not."""
        episodes = STEP_CHECKER_FIELDS | ENVIRONMENT_FIELDS if multi_turn else set()  # `Episodes.token_fields`
        missing = self.missing(TRAINER_FIELDS | (STEP_CHECKER_FIELDS if checks_steps else set()) | episodes)
        if missing:
            raise ValueError(f"method {self.name} needs {'; '.join(missing)}, which this run does not provide")
        self.sampler.check(options, checks_steps, multi_turn)

    def for_run(self, options: RolloutConfig) -> Method:
        """The method with the estimator switches its sampler's options imply (the `nomask` split)."""
        switches = self.sampler.estimator_switches(options)
        return self.with_overrides(estimator=switches) if switches else self

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
            estimator=_override(self.estimator, estimator or {}, f"{self.name}'s credit"),
            loss=_override(self.loss, loss or {}, f"{self.name}'s loss"),
        )

    def switches(self) -> dict[str, dict[str, Any]]:
        """Every switch of the method with its value: `{"estimator": {...}, "loss": {...}}` (config keys
        `credit:` and `loss:`)."""
        return {part: {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
                for part, obj in (("estimator", self.estimator), ("loss", self.loss))}


def _override(obj: Any, changes: Mapping[str, Any], where: str) -> Any:
    allowed = [f.name for f in dataclasses.fields(obj)]
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValueError(f"unknown switch(es) {', '.join(unknown)} of {where} ({type(obj).__name__}); allowed: "
                         f"{', '.join(allowed)}")
    return dataclasses.replace(obj, **changes)


def attribute_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string under it), whitespace collapsed, from a class and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # builtins, object
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, doc in zip(body, body[1:]):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                docs[field.target.id] = " ".join(doc.value.value.split())
    return docs


def summary(method: Method) -> dict[str, str]:
    """The method's row of the overview (`credo methods`, one line each): its name, family, paper, what it changes
    (`brief`), its sampler's name and what it needs in a few words (`needs_in_brief`). Its sampler's choices and
    its switches are in `credo methods NAME`."""
    return {"method": method.name, "family": method.family, "paper": method.paper, "changes": method.brief,
            "sampler": method.sampler.name, "needs": needs_in_brief(method)}


def needs_in_brief(method: Method) -> str:
    """What a runner must fill for `method` (`Method.needs`) in a few words: "a step checker" for the step
    checker's fields, each other field by its name ("entropy", "ref_logp"); "-" for nothing."""
    words = ["a step checker"] if method.needs & STEP_CHECKER_FIELDS else []
    if method.needs & ENVIRONMENT_FIELDS or method.sampler.needs_environment:  # episodes fill the checker's fields
        words = ["an environment"]
    return ", ".join(words + sorted(method.needs - STEP_CHECKER_FIELDS - ENVIRONMENT_FIELDS)) or "-"


def needs_in_full(method: Method) -> str:
    """What a runner must fill for `method`, each field with its source (`credo methods NAME`); "-" for nothing."""
    return ", ".join(method.missing(frozenset())) or "-"


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
    GroupSampler(), GroupAdvantage(), PPOClipLoss(),
    brief="the reference: group-normalised rewards, PPO clip",
))
_add(Method(
    "dr_grpo", "baseline", "2503.20783",
    "no std scaling; token sums over a fixed length, so no length or difficulty bias",
    GroupSampler(), GroupAdvantage(scale="none"), PPOClipLoss(agg="seq_mean_token_sum_norm"),
    brief="no std scaling; fixed-length token sums",
))
_add(Method(
    "dapo", "baseline", "2503.14476",
    "clip-higher (0.2 / 0.28) and a token mean over the batch (dynamic sampling: a sampler option)",
    GroupSampler(), GroupAdvantage(), PPOClipLoss(clip_high=0.28, agg="token_mean"),
    brief="clip-higher; token mean over the batch",
))
_add(Method(
    "gspo", "baseline", "2507.18071",
    "one sequence-level ratio (geometric mean of token ratios) per response, clip 3e-4 / 4e-4",
    GroupSampler(), GroupAdvantage(), TraceLoss(**_GSPO_CLIP),
    brief="one sequence-level ratio per response",
))
_add(Method(
    "reinforce", "baseline", "2402.03300",
    "no ratio and no clip: -A * logp with the group baseline (the SRPO loss on fresh groups)",
    GroupSampler(), GroupAdvantage(), ReinforceLoss(),
    brief="no ratio, no clip: -A * logp",
))
_add(Method(
    "grpo_lambda", "trace", "2510.00194",
    "lambda-returns: each token's ratio is traced through the earlier tokens' log-probs",
    GroupSampler(), GroupAdvantage(), LambdaLoss(),
    brief="ratios traced back (lambda-returns)",
))
_add(Method(
    "p_trace", "trace", "2605.05965",
    "each token's ratio carries a bounded, decayed mean of the earlier ratios; own and combined ratio clipped",
    GroupSampler(), GroupAdvantage(), TraceLoss(decay=0.95, clip_high=0.28),
    brief="each ratio carries a decayed trace of earlier ones",
))
_add(Method(
    "s_trace", "trace", "2605.05965",
    "P-trace whose trace keeps only the top-20% entropy tokens' ratios (the others count as zeros)",
    GroupSampler(), EntropySelection(), TraceLoss(decay=0.95, clip_high=0.28),
    brief="P-trace over the top-20% entropy tokens",
))
_add(Method(
    "rrpo", "reset", "2605.25507",
    "resets a failed rollout to a random thought; continuations train on their suffix only",
    ResetSampler(localiser="random"), ResetAdvantage(), ReinforceLoss(empty_rows="count"),
    brief="failures reset to a random thought",
))
_add(Method(
    "srpo", "reset", "2605.25507",
    "resets a failed rollout to the first wrong thought, localised by the policy itself",
    ResetSampler(localiser="self"), ResetAdvantage(), ReinforceLoss(empty_rows="count"),
    brief="failures reset to their self-localised first error",
))
_add(Method(
    "srpo_clip", "reset", "2605.25507",
    "SRPO's ablation: the same reset groups and masks with GRPO's PPO-clip loss instead of REINFORCE",
    ResetSampler(localiser="self"), ResetAdvantage(), PPOClipLoss(empty_rows="count"),
    brief="SRPO's resets with GRPO's PPO clip",
))
_add(Method(
    "ibpo", "revision", "2605.16302",
    "failures the policy can repair from a sibling are penalised less; their edits are blamed, never credited",
    RevisionSampler(), RevisionAdvantage(), TraceLoss(**_GSPO_CLIP),
    brief="repairable failures penalised less, edits blamed",
))
_add(Method(
    "oracle_blame", "oracle", "credo",
    "the yardstick: GRPO whose failures are blamed only from their first wrong step (tasks with a step checker)",
    GroupSampler(), OracleBlameAdvantage(), PPOClipLoss(),
    brief="failures blamed from their first wrong step",
))
_add(Method(
    "oracle_steps", "oracle", "credo",
    "the yardstick of per-decision blame: each thought gets its own correctness, group-normalised per prompt and "
    "thought, whatever the outcome (tasks with a step checker)",
    GroupSampler(), StepOracleAdvantage(), PPOClipLoss(),
    brief="each thought credited by its own correctness",
))
_add(Method(
    "ibpo_clip", "revision", "2605.16302",
    "IBPO's switch: the same shaped rewards and edited-token masks with GRPO's PPO-clip loss instead of GSPO",
    RevisionSampler(), RevisionAdvantage(), PPOClipLoss(),
    brief="IBPO's shaping with GRPO's PPO clip",
))
_add(Method(
    "gtpo", "token", "2508.04349",
    "GTPO-style: each token's advantage is weighted by its entropy relative to its response's mean (mean weight 1)",
    GroupSampler(), EntropyWeightedAdvantage(), PPOClipLoss(),
    brief="advantages weighted by token entropy",
))
_add(Method(
    "vine", "value", "2410.01679",
    "VinePPO: each thought's tokens get the change in a Monte-Carlo value (K continuations per state), whitened",
    VineSampler(), VineAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="Monte-Carlo value change per thought",
))
_add(Method(
    "spo_chain", "value", "2505.23564",
    "SPO-chain: segments end before every 5th token below p 0.9, each gets its Monte-Carlo value change (K = 9); "
    "only those tokens train",
    SpoChainSampler(), SegmentAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="Monte-Carlo value change per segment",
))
_add(Method(
    "spo_tree", "value", "2505.23564",
    "SPO-tree: a 6-6-6 tree of 30-token segments, each edge gets its child's value minus its parent's (the mean of "
    "the leaves below); only tokens below p 0.9 train",
    SpoTreeSampler(), TreeEdgeAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="value change per edge of a segment tree",
))
_add(Method(
    "ktae", "token", "2505.16826",
    "adds a key-token value in (-1, 1) to each token's advantage: how strongly its presence goes with success",
    GroupSampler(), KeyTokenAdvantage(), PPOClipLoss(),
    brief="adds a key-token value to each advantage",
))
_add(Method(
    "otb", "token", "2602.07078",
    "a baseline per position: the group's rewards weighted by each response's gradient energy so far; no std scaling",
    GroupSampler(), OptimalTokenBaseline(), PPOClipLoss(agg="token_mean"),
    brief="a per-position baseline (gradient energy)",
))
_add(Method(
    "fr3e", "value", "2507.07017",
    "FR3E: trains continuations from the prompt and before its responses' highest-entropy tokens; a state's centred "
    "rewards divided by exp of its Monte-Carlo value change",
    FR3ESampler(), FirstReturnAdvantage(), PPOClipLoss(clip_high=0.3, agg="token_mean"),
    brief="branches at high-entropy tokens; value-scaled",
))
_add(Method(
    "mt_grpo", "turn", "2505.11821",
    "MT-GRPO: an episode's first turn also gets its group-normalised turn reward (lambda 1, the public code's v1; "
    "turns: all credits every turn's turn rewards to go against its state's baseline); token-mean PPO clip",
    GroupSampler(), MTGRPOAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="adds a group-normalised turn reward per turn",
))
_add(Method(
    "gigpo", "turn", "2505.10978",
    "GiGPO: each turn of an episode gets its episode's group-relative return plus its discounted return relative to "
    "the turns its prompt's episodes took from the same environment state (tasks with an environment)",
    GroupSampler(), GiGPOAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="episode advantage + anchor-state step advantage",
))
_add(Method(
    "igpo", "turn", "2510.14967",
    "IGPO: each turn's reward is the rise in the policy's probability of the gold answer across it (the last turn's: "
    "the outcome), normalised with its group's rewards and summed over the turns to go (tasks with an environment)",
    InfoGainSampler(), IGPOAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="information-gain turn rewards, summed to go",
))
_add(Method(
    "tree_grpo", "turn", "2509.21240",
    "Tree-GRPO: 2 trees of episodes per prompt, each branching twice at random turn boundaries; a leaf gets its reward "
    "normalised among its prompt's leaves plus among its tree's, so shared turns earn their subtree's credit",
    TreeSampler(), TreeGroupAdvantage(), PPOClipLoss(agg="token_mean"),
    brief="tree search over turns; prompt + tree advantages",
))
_add(Method(
    "arpo", "turn", "2507.19849",
    "ARPO: a prompt's first episodes branch after tool results, each with probability 0.5 plus 0.2 times the rise in "
    "the policy's entropy over the first turn's, until the group is full (fresh episodes top it up); GRPO with the "
    "sample std on every row, shared turns included; token-mean PPO clip",
    EntropyBranchSampler(), GroupAdvantage(std_ddof=1), PPOClipLoss(agg="token_mean"),
    brief="branches after tool results where entropy rises",
))
