"""credo's credit estimators and policy losses inside verl 0.9.1 (`pip install 'credo[verl]'`).

An adapter only: the math stays in `credo.credit` and `credo.losses`. `register()` adds, for every credo
method that verl's interfaces can carry, an advantage estimator and a policy loss to verl's own registries
(`verl.trainer.ppo.core_algos`), under the names of `verl_names()` (`credo_grpo`, `credo_srpo`, ...), and
the agent loops of the reset and revision methods (`credo.integrations.verl_agent`) and the episode agent loop
of tasks with an environment (`credo_episodes`, `credo.integrations.verl_episodes`). Then a verl run selects
them like verl's own:

    algorithm.adv_estimator=credo_srpo
    actor_rollout_ref.actor.policy_loss.loss_mode=credo_srpo
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.rollout.agent.default_agent_loop=credo_srpo

verl looks estimators and losses up in each of its processes (the trainer and every actor worker are Ray
actors), so registration must run in each: set `VERL_USE_EXTERNAL_MODULES=credo.integrations.verl_plugin`
in the environment of every node (verl imports the named modules whenever it is imported).
`register(conventions="verl")` (in such a module) adds `credo_grpo_verl`, ... with verl's own conventions
(`CONVENTIONS`), which reproduce verl's `grpo` estimator and `vanilla` loss.

verl looks an estimator or loss up only when it first computes advantages or a loss, after the first rollout,
so credo checks a run's choices when verl checks its config (`validate_config`, which credo's plugin hooks into
verl's own check, `hook_validate_config`): a refused or unknown `credo_*` name, a `loss_agg_mode` other than the
credo loss's, a reset or revision estimator without its agent loop (or the reverse), a turn-level estimator
without the episode agent loop are one-line errors naming the key and value, before Ray starts. A refused name
is also registered as a function raising credo's reason (`register_refusal`), for launchers that skip verl's
check.

What verl passes, and so what the adapters can use (verl 0.9.1):
- estimator: `token_level_rewards` (B, T) (the row reward is their sum), `response_mask` (B, T), `index`
  (B,) (the prompt uid of each row: credo's `group_id`), `config` (verl's AlgoConfig). No responses (token
  ids), no old log-probs, no entropies, no non-tensor fields. (verl gives `old_log_probs` and, with
  `actor.calculate_sum_pi_squared=true`, `sum_pi_squared` to its own `optimal_token_baseline` estimators only,
  chosen by name: credo's `otb` is refused; verl's estimator computes it but for credo's rule on groups of equal
  rewards, docs/methods.md sec. 10.)
- policy loss: `old_log_prob`, `log_prob`, `advantages`, `response_mask` (B, T), `loss_agg_mode`, `config`
  (the ActorConfig, whose `global_batch_info` holds the mini-batch's normalisers) and
  `rollout_is_weights`. No entropies, no reference log-probs (verl adds its KL loss itself).

So: the group methods run credo's estimator on the rewards and uids; the reset and revision methods need
information about the whole group (separate base and suffix groups, revision outcomes) that the
estimator cannot see, so their agent loop runs credo's own sampler and estimator on the group and hands
each row's advantage over as its score, with the trained tokens (the suffix after a kept prefix, or
IBPO's edited tokens) as its `response_mask`; their verl estimator spreads that per-row advantage over
the mask. `response_mask` is also verl's loss mask (and its token count the loss normaliser), so suffix
rows train on the suffix only, as in credo. The turn-level methods (MT-GRPO: `reads_turns`, an estimator that
reads fields only an environment fills) run on credo's episode agent loop, whose rows are multi-turn episodes
(observation tokens outside `response_mask`) with each turn's reward and the episode's reward laid out in their
scores; their estimator recovers the turns from `response_mask`'s 0 -> 1 transitions and the rewards from the
scores (`credo.integrations.verl_episodes`), and returns credo's per-token advantages. `refusal` says, from a
method's parts, what cannot be carried (GiGPO's anchor states, for one).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from credo.batch import FIELD_SOURCES, RolloutBatch
from credo.checks import check_choice
from credo.credit import GroupAdvantage
from credo.extras import require
from credo.integrations.conventions import convention_switches
from credo.methods import ENVIRONMENT_FIELDS, METHODS, Method, get_method
from credo.rollout.samplers import SAMPLERS

VERL_VERSION = "0.9.1"
"""The verl release these adapters follow (signatures, registries, `global_batch_info`, agent loops)."""

ESTIMATOR_FIELDS = frozenset()
"""The optional batch fields verl's advantage-estimator signature carries for i.i.d. group methods: none
(`token_level_rewards`, `response_mask`, `index`); the estimator's results reach the loss as `advantages`."""

ESTIMATOR_KEY = "algorithm.adv_estimator"
LOSS_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"
AGG_KEY = "actor_rollout_ref.actor.loss_agg_mode"
AGENT_LOOP_KEY = "actor_rollout_ref.rollout.agent.default_agent_loop"
"""The keys of verl's config that select credo's estimator, loss, aggregation and agent loop."""

AGENT_LOOP_FIELDS = frozenset({"correct"})
"""Besides the sampler's own records, what credo's agent loops give their estimator: the verdicts (verl's
reward functions return no step checker's `blame_start`, and no entropies)."""

EPISODE_FIELDS = frozenset({"thought_ids", "turn_reward"})
"""What credo's episode agent loop hands verl's advantage estimator besides rewards, masks and uids, in its rows'
scores (`credo.integrations.verl_episodes`): each token's turn (recovered from `response_mask`) and each turn's
reward. Not the anchor states GiGPO reads (`turn_anchor`), nor the per-turn checker's verdicts."""

EPISODE_LOOP = "credo_episodes"
EPISODE_LOOP_TARGET = "credo.integrations.verl_episodes.EpisodeAgentLoop"
"""The name `register` gives credo's episode agent loop in verl's registry, and its class."""


def refusal(method: Method) -> str | None:
    """Why verl's interfaces cannot carry `method`, or None if they can (asked of the method's parts).

    i.i.d. group methods: the estimator sees rewards, masks and uids only (not even the token ids), and only
    `advantages` reach the policy loss; one that reads turn fields (`reads_turns`) runs on credo's episode agent
    loop, whose rows' scores also carry `EPISODE_FIELDS`. A method whose sampler declares a verl agent loop
    (`Sampler.verl_agent_loop`: resets, revisions) runs credo's sampler and estimator in it, which hands each row's
    advantage and trained-token mask over."""
    turns = False
    if method.sampler.verl_agent_loop is not None:
        available, carried = AGENT_LOOP_FIELDS | frozenset(method.sampler.records), {"advantages", "loss_mask"}
    elif method.sampler.iid:
        if method.sampler.records:
            return (f"its sampler draws {method.sampler.draws}, recording {', '.join(sorted(method.sampler.records))}, "
                    "for which credo has no verl agent loop")
        if getattr(method.estimator, "reads_token_ids", False):
            return "its estimator reads the sampled token ids, which verl does not pass to an advantage estimator"
        turns = reads_turns(method)
        available, carried = (EPISODE_FIELDS if turns else ESTIMATOR_FIELDS), {"advantages"}
    else:
        return f"it draws {method.sampler.draws}, for which credo has no verl agent loop"
    missing = method.missing(available)
    if missing:
        via = " (credo's episode agent loop hands it each token's turn and each turn's reward only)" if turns else ""
        return (f"it needs {'; '.join(missing)}, which verl passes neither to the advantage estimator nor to the "
                f"policy loss{via}")
    dropped = sorted(method.estimator.writes - carried)
    if dropped:
        return (f"its estimator also writes {', '.join(f'{f} ({FIELD_SOURCES[f]})' for f in dropped)}, which verl "
                "cannot carry from the advantage estimator to the policy loss")
    return None


def reads_turns(method: Method) -> bool:
    """Whether `method` reads fields only a task's environment fills (`credo.methods.ENVIRONMENT_FIELDS`): its rows
    must be credo's multi-turn episodes, from credo's episode agent loop (`EPISODE_LOOP`)."""
    return bool(method.needs & ENVIRONMENT_FIELDS)


def verl_names() -> dict[str, str]:
    """verl name -> credo method, for every registered method verl can carry (`refusal`): each is both an
    advantage estimator and a policy loss in verl's registries (`credo_grpo`, `credo_srpo`, ...)."""
    return {f"credo_{name}": name for name in METHODS if refusal(METHODS.get(name)) is None}

AGG_MODES = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
"""verl's `loss_agg_mode` -> credo's `agg` (verl's token-sum and seq-mean-token-sum have no credo form)."""

AGENT_LOOP_MODULE = "credo.integrations.verl_agent"
"""The module of credo's verl agent loops: the classes the samplers name (`Sampler.verl_agent_loop`)."""


def agent_loop_targets() -> set[str]:
    """The `_target_` of every credo agent loop: each class a registered sampler names (`Sampler.verl_agent_loop`)."""
    return {f"{AGENT_LOOP_MODULE}.{SAMPLERS.get(name).verl_agent_loop}" for name in SAMPLERS
            if SAMPLERS.get(name).verl_agent_loop is not None}

CONVENTIONS = ("credo", "verl")
"""`conventions` of `register` / `register_method`: credo's defaults, or verl's own (`credo.integrations.
conventions`: the classes' "verl" declarations, plus `single_row_advantages`), with which `credo_grpo` and `credo_dr_grpo`
compute what verl's `grpo` estimator and `vanilla` loss compute."""

_registered: dict[str, tuple] = {}


def _core_algos():
    require("verl", "verl", "the verl integration")
    from verl.trainer.ppo import core_algos

    return core_algos


def register(*, conventions: str = "credo", agent_loops: bool = True) -> list[str]:
    """Register every method of `verl_names()` with verl (and, with `agent_loops`, the agent loops of the
    reset and revision methods), and every other credo method as a refusal (`register_refusal`); idempotent.
    Returns the registered names: those of `verl_names()`, with `conventions="verl"` each followed by `_verl`
    (`credo_grpo_verl`, ...), so that both sets can live side by side (credo's plugin registers the plain
    names in every verl process)."""
    suffix = "" if conventions == "credo" else f"_{conventions}"
    supported = verl_names()
    names = [verl_name + suffix for verl_name in supported]
    for name, method in zip(names, supported.values()):
        register_method(name, method, conventions=conventions, agent_loop=agent_loops)
    if agent_loops:
        register_episode_loop()
    for name in METHODS:
        if f"credo_{name}" not in supported:
            register_refusal(f"credo_{name}{suffix}", METHODS.get(name))
    return names


def register_method(
    verl_name: str,
    method: str,
    *,
    estimator: Mapping[str, Any] | None = None,
    loss: Mapping[str, Any] | None = None,
    conventions: str = "credo",
    agent_loop: bool = True,
) -> Method:
    """Register credo's `method` (with switch overrides, as `get_method` takes them) under `verl_name`, as an
    advantage estimator, a policy loss and, for reset and revision methods, an agent loop.

    `conventions="verl"` applies verl's conventions first (`CONVENTIONS`), then the overrides. Registering the
    same name again with the same method, conventions and overrides does nothing; with different ones it is a
    `ValueError` (verl's registries hold one function per name). For example, in a module named by
    `VERL_USE_EXTERNAL_MODULES`: `register_method("credo_p_trace_90", "p_trace", loss={"decay": 0.9})`.
    """
    key = (method, conventions, _frozen(estimator), _frozen(loss), agent_loop)
    estimator, loss = method_switches(method, conventions=conventions, estimator=estimator, loss=loss)
    chosen = get_method(method, estimator=estimator, loss=loss)
    if verl_name in _registered:
        if _registered[verl_name] != key:
            raise ValueError(f"verl name {verl_name!r} is already registered for credo method "
                             f"{_registered[verl_name][0]!r} with other switches; pick another name")
        return chosen
    check_supported(chosen)
    core = _core_algos()
    existing = core.ADV_ESTIMATOR_REGISTRY.get(verl_name)
    if existing is not None and not hasattr(existing, "credo_method") and not hasattr(existing, "credo_refusal"):
        raise ValueError(f"verl already has an advantage estimator {verl_name!r} that is not credo's")
    core.ADV_ESTIMATOR_REGISTRY[verl_name] = advantage_fn(chosen, verl_single_rows=conventions == "verl")
    core.POLICY_LOSS_REGISTRY[verl_name] = policy_loss_fn(chosen)
    if agent_loop and chosen.sampler.verl_agent_loop is not None:
        register_agent_loop(verl_name, method, estimator=estimator, loss=loss)
    _registered[verl_name] = key
    return chosen


def method_switches(method: str, *, conventions: str = "credo", estimator: Mapping[str, Any] | None = None,
                    loss: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The estimator and loss switches of credo's `method` under `conventions` (one of `CONVENTIONS`), with
    the overrides `estimator` / `loss` applied last."""
    check_choice("credo.integrations.verl", "conventions", conventions, CONVENTIONS)
    preset_estimator, preset_loss = convention_switches(get_method(method), conventions)
    return {**preset_estimator, **(estimator or {})}, {**preset_loss, **(loss or {})}


def check_supported(method: Method) -> None:
    """`ValueError` unless verl's estimator and loss signatures can carry `method` (see `refusal`)."""
    why = refusal_message(method)
    if why is not None:
        raise ValueError(why)


def refusal_message(method: Method) -> str | None:
    """Why credo has no verl adapter for `method`, with the way out where verl has one; None if it has."""
    why = refusal(method)
    if why is None:
        return None
    hint = "; use verl's own actor.use_kl_loss / kl_loss_coef for a KL penalty" if "ref_logp" in method.needs else ""
    return f"credo method {method.name!r} has no verl adapter: {why}{hint}"


def register_refusal(verl_name: str, method: Method) -> None:
    """Put, under `verl_name` in verl's estimator and loss registries, a function that raises why verl cannot
    carry `method` (unless verl has something of that name). `validate_config` reads it from the registry,
    and a launcher that skips verl's config check still stops with credo's reason at verl's first lookup,
    not with verl's "unknown estimator"."""
    core = _core_algos()
    for registry, key in ((core.ADV_ESTIMATOR_REGISTRY, ESTIMATOR_KEY), (core.POLICY_LOSS_REGISTRY, LOSS_KEY)):
        registry.setdefault(verl_name, _refused(f"{key}={verl_name}: {refusal_message(method)}"))


def _refused(message: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ValueError(message)

    refuse.credo_refusal = message
    return refuse


def register_agent_loop(
    verl_name: str, method: str, *, estimator: Mapping[str, Any] | None = None,
    loss: Mapping[str, Any] | None = None, **options: Any,
) -> None:
    """Add the agent loop of a reset or revision method to verl's agent-loop registry as `verl_name`.

    The entry is what verl's `agent_loop_config_path` YAML would hold: the class path plus constructor
    keyword arguments (`method`, the switch overrides, and `options` such as `resets={...}`)."""
    chosen = get_method(method, estimator=estimator, loss=loss)
    if chosen.sampler.verl_agent_loop is None:
        raise ValueError(f"credo method {method!r} samples i.i.d. groups: use verl's own single_turn_agent")
    require("verl", "verl", "the verl integration")
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = {"_target_": f"{AGENT_LOOP_MODULE}.{chosen.sampler.verl_agent_loop}", "method": method}
    entry.update({k: dict(v) for k, v in (("estimator", estimator), ("loss", loss)) if v})
    entry.update(options)
    _agent_loop_registry[verl_name] = entry


def register_episode_loop(verl_name: str = EPISODE_LOOP) -> None:
    """Add credo's episode agent loop (`credo.integrations.verl_episodes.EpisodeAgentLoop`: a credo task's
    environment, one episode per session, the task and start state read from each dataset row) to verl's
    agent-loop registry as `verl_name`."""
    require("verl", "verl", "the verl integration")
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    _agent_loop_registry[verl_name] = {"_target_": EPISODE_LOOP_TARGET}


def _frozen(overrides: Mapping[str, Any] | None) -> tuple:
    return tuple(sorted((overrides or {}).items()))


# --------------------------------------------------------------------------------------------------
# Tensors: verl's (B, T) layout -> RolloutBatch
def response_cover(mask: Tensor) -> Tensor:
    """(B, T) bool: positions up to each row's last masked token.

    verl's `response_mask` may hold leading zeros (a reset continuation's kept prefix) or holes (tool
    tokens of multi-turn rollouts); credo's `response_mask` is left-aligned, so the batch takes this cover
    as its response and verl's mask as its loss mask."""
    positions = torch.arange(mask.shape[1], device=mask.device)  # (T,)
    last = torch.where(mask, positions, -1).amax(dim=1)  # (B,)
    return positions.unsqueeze(0) <= last.unsqueeze(1)


def group_ids(index: Sequence[Any], device: torch.device | str = "cpu") -> Tensor:
    """(B,) int64 group ids from verl's per-row prompt uids (in order of first appearance)."""
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(uid, len(ids)) for uid in list(index)], dtype=torch.long, device=device)


def advantage_batch(token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Any]) -> RolloutBatch:
    """The RolloutBatch an estimator needs from what verl's `compute_advantage` passes: rewards (the sum of
    the token-level rewards, in their dtype, as verl's `token_level_rewards.sum(dim=-1)`), groups (uids), the
    response (cover of the mask) and the loss mask (the mask)."""
    mask = response_mask.bool()
    B, T = mask.shape
    if len(index) != B:
        raise ValueError(f"verl's index has {len(index)} uids for {B} rows")
    device = token_level_rewards.device
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long, device=device),
        response_mask=response_cover(mask),
        group_id=group_ids(index, device),
        rewards=token_level_rewards.detach().sum(dim=-1),
        old_logp=torch.zeros(B, T, device=device),
        loss_mask=mask,
    )


def loss_batch(old_log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
               rollout_is_weights: Tensor | None = None) -> RolloutBatch:
    """The RolloutBatch a credo loss needs from verl's policy-loss arguments. verl's mask is the loss mask
    and the trace mask (tool and prefix tokens enter no trace). verl's rollout-correction weights `w >= 0`
    are folded into the advantages: every credo loss is `w`-homogeneous in `A` (`max(-A r, -A clip(r)) w =
    max(-(A w) r, -(A w) clip(r))`, likewise for dual clip and REINFORCE), so this is exact."""
    mask = response_mask.bool()
    B, T = mask.shape
    adv = advantages.detach().to(old_log_prob.dtype)
    if rollout_is_weights is not None:
        adv = adv * rollout_is_weights.detach().to(adv.dtype)
    device = old_log_prob.device
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long, device=device),
        response_mask=response_cover(mask),
        group_id=torch.zeros(B, dtype=torch.long, device=device),
        rewards=torch.zeros(B, device=device),
        old_logp=old_log_prob.detach(),
        loss_mask=mask,
        trace_mask=mask,
        advantages=torch.where(mask, adv, torch.zeros((), dtype=adv.dtype, device=device)),
    )


# --------------------------------------------------------------------------------------------------
# The functions registered with verl
def advantage_fn(method: Method, *, verl_single_rows: bool = False) -> Callable[..., tuple[Tensor, Tensor]]:
    """verl's advantage-estimator signature over credo's `method`; returns `(advantages, returns)` in the dtype
    of `token_level_rewards`. The function carries `credo_method` (the name) and `method` (with its switches).

    Group methods: credo's estimator over the uid groups (with `verl_single_rows`, a group of one row gets
    verl's advantage, `single_row_advantages`). `algorithm.norm_adv_by_std_in_grpo=False` turns the
    std scaling off (`scale="none"`, Dr. GRPO), as for verl's GRPO; an estimator without that switch refuses it.
    Turn-level methods (`reads_turns`): the same over the episodes that credo's episode agent loop laid out in
    its rows (`credo.integrations.verl_episodes.episode_batch`: turns from `response_mask`, turn rewards and the
    episode's reward from the scores), per-token advantages as credo's estimator gives them. Reset and revision
    methods: the agent loop already ran credo's estimator on the whole group, and each row's score *is* its
    advantage, spread over `response_mask` (the row's trained tokens); scores that do not add up to 0 over a
    prompt's rows are a `ValueError` (rewards from another agent loop, read as advantages, would train silently
    wrong)."""
    precredited = method.sampler.verl_agent_loop is not None
    batch_of = advantage_batch
    if reads_turns(method):
        from credo.integrations.verl_episodes import episode_batch as batch_of

    def compute(token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Any] | None = None,
                config: Any = None, **kwargs: Any) -> tuple[Tensor, Tensor]:
        mask = response_mask.bool()
        if precredited:
            row_adv = token_level_rewards.detach().sum(dim=-1)  # (B,)
            if index is not None:
                _check_precredited(method.name, row_adv, index)
            advantages = row_adv.unsqueeze(1) * mask  # (B, T)
        else:
            if index is None:
                raise ValueError(f"credo estimator {method.name!r} needs verl's `index` (prompt uids) to form groups")
            estimator = method.estimator
            if config is not None and not config.get("norm_adv_by_std_in_grpo", True):
                why = std_switch_refusal(method)
                if why is not None:
                    raise ValueError(why)
                estimator = dataclasses.replace(estimator, scale="none")
            credited, _ = estimator(batch_of(token_level_rewards, response_mask, index))
            verl_rows = verl_single_rows and isinstance(estimator, GroupAdvantage)  # verl's rule is its GRPO's
            advantages = single_row_advantages(estimator, credited) if verl_rows else credited.advantages
        advantages = advantages.to(token_level_rewards.dtype)
        return advantages, advantages

    compute.credo_method, compute.method = method.name, method
    compute.__name__ = compute.__qualname__ = f"credo_{method.name}_advantage"
    return compute


def std_switch_refusal(method: Method) -> str | None:
    """Why `algorithm.norm_adv_by_std_in_grpo=False` cannot apply to `method`'s estimator (it has no `scale` switch
    to turn the std scaling off), or None if it can."""
    if "scale" in {f.name for f in dataclasses.fields(method.estimator)}:
        return None
    return (f"algorithm.norm_adv_by_std_in_grpo=False: credo estimator {_verl_name(method.name)!r} has no std-scaling "
            f"switch to turn off ({type(method.estimator).__name__}); set it to True (the method's own switches: "
            "credo.integrations.verl.register_method(..., estimator={...}))")


def single_row_advantages(estimator: GroupAdvantage, batch: RolloutBatch) -> Tensor:
    """(B, T) `batch.advantages` with verl's advantage for the rows of groups of one row.

    verl's `compute_grpo_outcome_advantage` gives such a group mean 0 and std 1 (`id2mean = torch.tensor(0.0)`,
    `id2std = torch.tensor(1.0)`), so `A = r / (1 + eps)`, or `A = r` without std scaling; credo's estimator
    gives 0, as to every group without spread. verl adds `eps` to a float32 1.0, so the divisor here is
    rounded to float32 too. `min_advantage` clamps as in `GroupAdvantage`."""
    _, inverse, counts = torch.unique(batch.group_id, return_inverse=True, return_counts=True)
    single = counts[inverse] == 1  # (B,)
    rows = batch.rewards
    if estimator.scale != "none":
        rows = rows / float(torch.tensor(1.0, dtype=torch.float32) + estimator.eps)
    if estimator.min_advantage is not None:
        rows = rows.clamp(min=estimator.min_advantage)
    own = rows.unsqueeze(1) * batch.loss_mask  # (B, T)
    return torch.where(single.unsqueeze(1), own.to(batch.advantages.dtype), batch.advantages)


def _check_precredited(name: str, row_adv: Tensor, index: Sequence[Any]) -> None:
    """Group-normalised advantages add up to 0 over each prompt's rows (every base, suffix or revision group
    does); scores that do not are rewards from another agent loop, which this estimator would misread."""
    groups = group_ids(index, row_adv.device)
    sums = torch.zeros(int(groups.max()) + 1, dtype=row_adv.dtype, device=row_adv.device).index_add_(0, groups, row_adv)
    bad = sums.abs() > 1e-3
    if bad.any():
        uid = list(index)[int(torch.nonzero(bad[groups])[0])]
        raise ValueError(
            f"credo estimator {name!r}: the scores of prompt {uid!r} add up to {float(sums[bad][0]):.4g}, not 0; it "
            f"reads per-row advantages from credo's agent loop: set actor_rollout_ref.rollout.agent.default_agent_loop="
            f"{_verl_name(name)} (and algorithm.use_kl_in_reward=False)")


def _verl_name(method: str) -> str:
    return next((verl for verl, credo in verl_names().items() if credo == method), f"credo_{method}")


def policy_loss_fn(method: Method) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """verl's policy-loss signature over credo's loss of `method`; returns `(loss, metrics)`. The function
    carries `credo_method` (the name) and `method` (with its switches).

    The aggregation must be the method's (`check_agg`).
    Normalisers come from verl's `config.global_batch_info` (tokens or rows of the whole mini-batch over all
    data-parallel ranks, divided by `dp_size`, exactly as verl's `agg_loss`), so micro-batches and ranks add
    up to the mini-batch loss; `loss_scale_factor`, when set, is the Dr. GRPO divisor. Without them (a plain
    call) the micro-batch normalises itself as credo does. verl's `clip_ratio*` settings do not apply: the
    method's clip values do (change them with `register_method(..., loss={...})`)."""
    base = method.loss

    def compute(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
                loss_agg_mode: str = "token-mean", config: Any = None,
                rollout_is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
        check_agg(method, loss_agg_mode)
        info = dict(getattr(config, "global_batch_info", None) or {}) if config is not None else {}
        loss = base
        if info.get("loss_scale_factor") is not None:
            loss = dataclasses.replace(loss, norm_len=int(info["loss_scale_factor"]))
        batch = loss_batch(old_log_prob, advantages, response_mask, rollout_is_weights)
        out = loss(log_prob, batch, **verl_normalisers(loss.agg, info))
        return out.loss, {f"credo/{name}": value for name, value in out.metrics.items()}

    compute.credo_method, compute.method = method.name, method
    compute.__name__ = compute.__qualname__ = f"credo_{method.name}_policy_loss"
    return compute


def check_agg(method: Method, loss_agg_mode: str) -> None:
    """`ValueError` unless verl's `loss_agg_mode` is the aggregation of `method`'s loss (verl applies the same
    mode to its entropy and KL terms, so one of them silently differing would be a second source of truth)."""
    if AGG_MODES.get(loss_agg_mode) != method.loss.agg:
        wanted = next(mode for mode, agg in AGG_MODES.items() if agg == method.loss.agg)
        raise ValueError(
            f"{AGG_KEY}={loss_agg_mode}: credo method {method.name!r} aggregates its loss as {method.loss.agg}; set "
            f"{AGG_KEY}={wanted} (or register a variant with credo.integrations.verl.register_method(..., "
            f"loss={{'agg': ...}}))")


def verl_normalisers(agg: str, info: Mapping[str, Any]) -> dict[str, float]:
    """credo's `num_tokens` / `num_rows` from verl's `global_batch_info`: verl divides a micro-batch's token
    sum by `batch_num_tokens / dp_size` (token-mean) and its row sum by `global_batch_size / dp_size`
    (sequence modes; all rows of the mini-batch). Missing values: none (credo's own normalisation)."""
    dp_size = float(_number(info.get("dp_size")) or 1.0)
    if agg == "token_mean":
        tokens = _number(info.get("batch_num_tokens"))
        return {} if tokens is None else {"num_tokens": max(tokens, 1.0) / dp_size}
    rows = _number(info.get("global_batch_size"))
    return {} if rows is None else {"num_rows": max(rows, 1.0) / dp_size}


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(value.item() if isinstance(value, Tensor) else value)


# --------------------------------------------------------------------------------------------------
# verl's config, checked before a run
def validate_config(config: Any) -> None:
    """`ValueError` (one line, naming the key and its value) if verl's composed `config` (a DictConfig) selects
    credo's estimators, losses or agent loops in a way credo cannot run: a refused or unregistered `credo_*`
    estimator or loss, a `loss_agg_mode` other than the credo loss's, or a reset or revision method's
    agent loop and estimator apart (`check_agent_loop`). Names are looked up in verl's registries, as verl
    looks them up, so `register` (credo's plugin) must have run; choices that are not credo's are not checked.
    verl's own config check runs it once credo's plugin is loaded (`hook_validate_config`)."""
    core = _core_algos()
    estimator = _registered_method(config, ESTIMATOR_KEY, core.ADV_ESTIMATOR_REGISTRY)
    loss = _registered_method(config, LOSS_KEY, core.POLICY_LOSS_REGISTRY)
    if loss is not None:
        check_agg(loss, _select(config, AGG_KEY))
    if (estimator is not None and estimator.sampler.verl_agent_loop is None
            and _select(config, "algorithm.norm_adv_by_std_in_grpo") is False):
        why = std_switch_refusal(estimator)
        if why is not None:
            raise ValueError(why)
    check_agent_loop(config, estimator)


def _select(config: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key)


def _registered_method(config: Any, key: str, registry: Mapping[str, Any]) -> Method | None:
    """The credo method that verl's `registry` holds under `config`'s value at `key`: None for a name that is
    not credo's, a `ValueError` for a refused name (`register_refusal`) or an unregistered `credo_*` one."""
    name = _select(config, key)
    function = registry.get(name)
    if function is None and str(name).startswith("credo_"):
        raise ValueError(f"{key}={name}: no credo method is registered with verl under this name; credo registers "
                         f"{', '.join(verl_names())} (credo.integrations.verl.register_method adds variants)")
    if hasattr(function, "credo_refusal"):
        raise ValueError(function.credo_refusal)
    return getattr(function, "method", None)


def check_agent_loop(config: Any, estimator: Method | None) -> None:
    """`ValueError` unless a reset or revision estimator (`estimator`: the credo method verl's config selects,
    or None) runs with credo's agent loop of the same method, and that agent loop with it: the loop scores
    each row with its advantage, which only that estimator reads as one (verl's would normalise it again).
    Such a run also needs rewards without verl's in-reward KL penalty, verl's v1 trainer (which keeps a
    prompt's sessions in one worker) and `rollout.n` sessions that make one group (the agent loop's
    `check_sessions`). A turn-level estimator (`reads_turns`) runs with credo's episode agent loop (the layout of
    its rows' scores is what it reads), with neither an in-reward KL penalty nor the v0 trainer; the episode loop
    runs with any estimator but a reset or revision one (an outcome estimator reads the rows' summed scores:
    the episode's reward plus its turn rewards), on verl's v1 trainer."""
    loop_name, estimator_name = _select(config, AGENT_LOOP_KEY), _select(config, ESTIMATOR_KEY)
    loop = _credo_agent_loop(config, loop_name)
    precredited = estimator is not None and estimator.sampler.verl_agent_loop is not None
    episodes = loop is not None and loop.get("_target_") == EPISODE_LOOP_TARGET
    turns = estimator is not None and reads_turns(estimator)
    if turns and not episodes:
        raise ValueError(f"{AGENT_LOOP_KEY}={loop_name}: credo estimator {estimator_name!r} reads each row's turns and "
                         f"turn rewards from credo's episode agent loop; set {AGENT_LOOP_KEY}={EPISODE_LOOP} (rows "
                         "made by credo.integrations.verl_episodes.episode_rows)")
    if episodes and not precredited:
        if turns and _select(config, "algorithm.use_kl_in_reward"):
            raise ValueError(f"algorithm.use_kl_in_reward=True: credo estimator {estimator_name!r} reads each turn's "
                             "reward from the rows' scores, which an in-reward KL penalty would change; set it to "
                             "False (actor_rollout_ref.actor.use_kl_loss adds a KL loss instead)")
        if not _select(config, "trainer.use_v1"):
            raise ValueError(f"trainer.use_v1=False: credo's agent loop {loop_name!r} lays each episode's turn "
                             "rewards out in its row's scores, which only verl's v1 trainer keeps; set "
                             "trainer.use_v1=True")
        return
    if loop is None and not precredited:
        return
    if precredited and (loop is None or loop.get("method") != estimator.name):
        raise ValueError(f"{AGENT_LOOP_KEY}={loop_name}: credo estimator {estimator_name!r} reads each row's advantage "
                         f"from credo's {estimator.name} agent loop; set {AGENT_LOOP_KEY}={estimator_name}")
    if not precredited:
        raise ValueError(f"{ESTIMATOR_KEY}={estimator_name}: credo's agent loop {loop_name!r} scores each row with its "
                         f"{loop['method']} advantage, which only credo's estimator reads as one; set "
                         f"{ESTIMATOR_KEY}={_verl_name(loop['method'])}")
    if _select(config, "algorithm.use_kl_in_reward"):
        raise ValueError(f"algorithm.use_kl_in_reward=True: credo estimator {estimator_name!r} reads the agent loop's "
                         "scores as advantages, which an in-reward KL penalty would change; set it to False "
                         "(actor_rollout_ref.actor.use_kl_loss adds a KL loss instead)")
    if not _select(config, "trainer.use_v1"):
        raise ValueError(f"trainer.use_v1=False: credo's agent loop {loop_name!r} needs a prompt's sessions in one "
                         "worker, which verl's v1 trainer keeps; set trainer.use_v1=True")
    from credo.integrations import verl_agent

    loop_class = getattr(verl_agent, estimator.sampler.verl_agent_loop)
    loop_class.check_sessions(loop, int(_select(config, verl_agent.GROUP_SIZE_KEY)))


def _credo_agent_loop(config: Any, name: str) -> dict[str, Any] | None:
    """The entry verl's workers will build for agent loop `name` if it is one of credo's, else None: the entry
    of `agent_loop_config_path` (which replaces the registry's of the same name), else verl's registry's."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.utils.import_utils import resolve_config_path

    path = _select(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    entries = {entry.name: entry for entry in OmegaConf.load(resolve_config_path(path))} if path else {}
    entry = entries.get(name, _agent_loop_registry.get(name))
    entry = OmegaConf.to_container(entry, resolve=True) if OmegaConf.is_config(entry) else entry
    credo = agent_loop_targets() | {EPISODE_LOOP_TARGET}
    return entry if entry is not None and entry.get("_target_") in credo else None


def hook_validate_config() -> None:
    """Make verl's config check run credo's first: `verl.utils.config.validate_config`, which verl's `main_ppo`
    (and `main_ppo_v0`, `one_step_off_policy.main_ppo`) calls on the composed config before Ray starts, is
    replaced by a wrapper that calls `validate_config(config)`, then verl's own. Idempotent.

    credo's one patch of verl, because verl 0.9.1 gives an extension no earlier view of the config: it looks
    estimators and losses up only when it computes them, after the first rollout. credo's plugin applies it
    on `import verl`, before `main_ppo` imports the function by name (`from verl.utils.config import
    validate_config`); `tests/integrations/test_verl.py` runs verl's `main_ppo` to keep it working."""
    from verl.utils import config as verl_config

    checked = verl_config.validate_config
    if hasattr(checked, "credo_checks"):
        return

    @functools.wraps(checked)
    def validate(config: Any, *args: Any, **kwargs: Any) -> Any:
        validate_config(config)
        return checked(config, *args, **kwargs)

    validate.credo_checks = True
    verl_config.validate_config = validate
