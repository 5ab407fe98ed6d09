"""Tree-GRPO's tree-group advantages (arXiv 2509.21240, "Tree Search for LLM Agent Reinforcement Learning";
github.com/AMAP-ML/Tree-GRPO at 90b1709, `verl/trainer/ppo/ray_trainer_ts.py::compute_advantage`, its `tree` branch,
over `core_algos.py::compute_grpo_outcome_advantage`; docs/methods.md sec. 16).

The tree sampler (`credo.rollout.samplers.tree`) grows `M` trees of episodes per prompt, branching at turn
boundaries, and trains `K` leaves of each: a row is a leaf's whole episode, `group_id` its prompt and `tree_id` its
tree. Each leaf `i` of reward `R_i` is normalised twice, among its prompt's `M K` leaves (inter-tree) and among its
tree's `K` (intra-tree), and the two are added, unweighted:

    z_G(R)_i = (R_i - mean_{j in G} R_j) / (std_{j in G} R_j + eps)      (std with `std_ddof`, 1: the code's)
    A_i = z_{prompt(i)}(R)_i + z_{tree(i)}(R)_i                          on every policy token of leaf i

A group of one leaf gets 0 (`lone="zero"`, credo's convention for a group of one, as GiGPO's `lone_episode`); the
code's singleton rule, mean 0 and std 1, gives it its raw reward `R_i / (1 + eps)` (`lone="score"`: a tree of `K = 1`
then adds each leaf's reward). The code's defaults (`K = 3` leaves of `1 + L N = 3`) never make one. A group whose
rewards are all equal gets exactly 0. Observations (off `loss_mask`) get 0.

The turn-level credit is implicit: a turn shared by several leaves (an inner node of a tree) appears in each of their
rows, so under a token-mean loss its tokens receive the sum of those leaves' advantages, the leaves' mean times their
number; a tree whose leaves beat the prompt's other trees' lifts its shared turns. `groups="inter"` is GRPO over the
prompt's leaves (the code's `grpo` estimator), `groups="intra"` the tree term alone (its `tree_inner`).

Conventions (the code's): the sample std (`torch.std`, `std_ddof=1`), `eps = 1e-6` added outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice, check_range
from credo.credit.base import Metrics
from credo.credit.gigpo import LONE, group_normalise

GROUPS = ("both", "inter", "intra")


def tree_group_advantages(rewards: Tensor, group_id: Tensor, tree_id: Tensor, *, groups: str = "both",
                          lone: str = "zero", std_ddof: int = 1, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(B,) each leaf's inter-tree term `z_prompt(R)` and (B,) its intra-tree term `z_tree(R)` (0 for the term that
    `groups` leaves out); a tree is a `(group_id, tree_id)` pair, so no tree spans prompts.

    Args:
        rewards: (B,) float.
        group_id: (B,) int64, each leaf's prompt.
        tree_id: (B,) int64, each leaf's tree.
        groups, lone, std_ddof, eps: `TreeGroupAdvantage`'s switches.
    """
    ones = torch.ones_like(rewards)
    norm = {"std": True, "std_ddof": std_ddof, "eps": eps, "lone": lone}
    _, prompts = torch.unique(group_id, return_inverse=True)
    _, trees = torch.unique(torch.stack([group_id, tree_id], dim=1), dim=0, return_inverse=True)
    inter = group_normalise(rewards, prompts, ones, **norm) if groups != "intra" else torch.zeros_like(rewards)
    intra = group_normalise(rewards, trees, ones, **norm) if groups != "inter" else torch.zeros_like(rewards)
    return inter, intra


@dataclass(frozen=True, kw_only=True)
class TreeGroupAdvantage:
    """Tree-GRPO's advantage: each leaf's reward normalised among its prompt's leaves plus normalised among its tree's
    (`tree_group_advantages`), on every policy token of its episode (observations get none)."""

    reads: ClassVar[frozenset[str]] = frozenset({"tree_id"})
    writes: ClassVar[frozenset[str]] = frozenset({"advantages"})

    groups: str = "both"
    """"both": inter-tree plus intra-tree (the code's `tree`) | "inter": the prompt's leaves only (its `grpo`) |
    "intra": the tree's leaves only (its `tree_inner`)."""
    lone: str = "zero"
    """A group of one leaf: "zero", 0 (credo's convention) | "score", its raw reward (mean 0, std 1: the code's)."""
    std_ddof: int = 1
    """1: the sample std (the code's `torch.std`); 0: the population std."""
    eps: float = 1e-6
    """Added to the std (the code's `epsilon`)."""

    def __post_init__(self) -> None:
        check_choice("TreeGroupAdvantage", "groups", self.groups, GROUPS)
        check_choice("TreeGroupAdvantage", "lone", self.lone, LONE)
        check_choice("TreeGroupAdvantage", "std_ddof", self.std_ddof, (0, 1))
        check_range("TreeGroupAdvantage", "eps", self.eps, 0.0)

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        if batch.tree_id is None:
            raise ValueError("tree_grpo needs RolloutBatch.tree_id (each leaf's tree), which the tree sampler records")
        inter, intra = tree_group_advantages(batch.rewards, batch.group_id, batch.tree_id, groups=self.groups,
                                             lone=self.lone, std_ddof=self.std_ddof, eps=self.eps)
        row = inter + intra  # (B,)
        advantages = torch.where(batch.loss_mask, row.unsqueeze(1), 0.0)  # (B, T)
        sizes = torch.unique(torch.stack([batch.group_id, batch.tree_id], dim=1), dim=0, return_counts=True)[1]
        return batch.replace(advantages=advantages), {
            "credit/adv_abs_mean": float(row.abs().mean()),
            "credit/inter_adv_abs_mean": float(inter.abs().mean()),
            "credit/intra_adv_abs_mean": float(intra.abs().mean()),
            "credit/tree_size": float(sizes.float().mean()),
        }
