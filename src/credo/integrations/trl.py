"""credo's credit estimators and losses inside TRL's `GRPOTrainer`: `CredoGRPOTrainer`.

TRL keeps everything it does well (generation, vLLM, reward functions, DeepSpeed/FSDP, logging, checkpoints);
credo replaces two things, through the smallest hooks TRL 1.x has:

- `_generate_and_score_completions`, once per generation batch: after TRL has generated and scored it, credo's
  credit estimator runs on the whole generation batch (all processes) and writes the per-token advantages, the
  loss mask and the trace mask into the buffered inputs. S-trace also needs the behaviour policy's per-token
  entropies: they come from one no-grad forward pass of the generation batch through TRL's own
  `_get_per_token_logps_and_entropies`, only for methods that need them.
- `_compute_loss`, on every micro-batch: TRL's forward pass gives the current log-probs, and credo's policy loss
  replaces TRL's. `old_logp` is TRL's `old_per_token_logps` where TRL computed them (a generation batch that
  spans several optimiser steps: `gradient_accumulation_steps` not a multiple of `steps_per_generation *
  num_iterations`), else the current log-probs detached (TRL's on-policy convention: the generation batch is
  used up within one optimiser step, so they are equal).

Gradient accumulation. TRL returns each micro-batch's loss already scaled for accumulation
(`loss_is_scaled_for_ga`). credo's aggregation denominators (`method.loss.normalisers`: the token count for
`token_mean`, the row count otherwise) are taken over the whole generation batch of all processes, then scaled
to one optimiser step's share, `gradient_accumulation_steps / steps_per_generation / num_processes`, the rule
TRL 1.16 applies to `num_items_in_batch` in its `dapo` loss. With `gradient_accumulation_steps ==
steps_per_generation` (TRL's default) and one process, the micro-batch losses of one optimiser step add up to
exactly credo's loss on the generation batch; otherwise the share is TRL's own approximation.

Which methods fit is derived from the registry (`refusal`, `supported_methods()`): a method whose sampler
draws i.i.d. groups (TRL's rollout shape: `num_generations` consecutive rows per prompt) and that needs no
batch field beyond what TRL gives (`TRL_FIELDS`: entropies, reference log-probs). Reset and revision methods
need their own samplers, oracle_blame a step checker: they are errors here, with the reason. DAPO's dynamic sampling is a credo sampler option and is not available in TRL; its overlong
penalty is a TRL reward function (`trl.rewards.get_soft_overlong_punishment`).

Multi-turn episodes: with `credo_episodes=TaskEpisodes(task)` (`credo.integrations.trl_episodes`) the generation
batch is a credo task's environment's episodes, sampled through TRL's `rollout_func`; their observation tokens are
out of the loss (TRL's `tool_mask`) and their turns reach the estimator (`EPISODE_FIELDS`), so the turn-level
methods (mt_grpo, gigpo) fit, and only then.

    from trl import GRPOConfig
    from credo.integrations.trl import CredoGRPOTrainer

    trainer = CredoGRPOTrainer(
        model=model, reward_funcs=[reward], args=GRPOConfig(output_dir="out", steps_per_generation=4),
        train_dataset=dataset, processing_class=tokenizer,
        credo_method="s_trace", credo_overrides={"loss": {"decay": 0.9}},
    )
    trainer.train()
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from packaging.version import Version
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_choice
from credo.credit.base import Metrics
from credo.extras import require
from credo.integrations.conventions import convention_switches
from credo.methods import METHODS, Method, get_method
from credo.tasks.base import Problem, Task

_trl = require("trl", "trl", "credo.integrations.trl (CredoGRPOTrainer)")
GRPOConfig, GRPOTrainer = _trl.GRPOConfig, _trl.GRPOTrainer

TRL_VERSIONS = ">=1.7,<2"
"""The TRL versions this adapter supports. It overrides private methods of `GRPOTrainer`; their contract
(`_calculate_rewards` returning the gathered (B, F) rewards, `_get_per_token_logps_and_entropies` returning
(logps, entropies, aux_loss), the keys of `_generate_and_score_completions`'s output, `_compute_loss(model,
inputs)` returning a loss already scaled for gradient accumulation) holds from 1.7 (the aux-loss return value
and the NaN-aware unscorable rewards came then) through 1.16, the version the tests run against. Older
versions are refused; 2.x, which may change private methods, gets a warning."""

_version = Version(_trl.__version__)
if _version < Version("1.7"):
    raise ImportError(
        f"credo.integrations.trl needs trl{TRL_VERSIONS}, found trl {_trl.__version__}; "
        f"install a supported one with: pip install 'trl{TRL_VERSIONS}'"
    )
if _version >= Version("2"):
    warnings.warn(
        f"credo.integrations.trl was tested with trl{TRL_VERSIONS}; trl {_trl.__version__} may have changed the "
        "GRPOTrainer internals it overrides", stacklevel=2,
    )

CONVENTIONS = ("credo", "trl")

PRIVATE_HOOKS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("inputs",),
    "_get_per_token_logps_and_entropies": ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                                           "compute_entropy", "compute_aux_loss"),
    "_compute_loss": ("model", "inputs"),
}
"""The private `GRPOTrainer` methods the adapter overrides or calls, with the parameters it passes them, in order
(`_get_per_token_logps_and_entropies` also takes `_FORWARD_KEYS` by name). `check_trl_hooks` holds the installed
TRL to them; the tests hold each one's behaviour (tests/integrations/test_trl_hooks.py)."""

_FORWARD_KEYS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)
"""Multimodal inputs TRL passes from the buffered inputs to its forward pass (as TRL's `_compute_loss` does)."""

_REPLACED_ARGS = {
    "loss_type": "credo_method decides the loss (grpo, dr_grpo, dapo, gspo, ...)",
    "epsilon": "credo_overrides={'loss': {'clip_low': ...}}",
    "epsilon_high": "credo_overrides={'loss': {'clip_high': ...}}",
    "delta": "credo_overrides={'loss': {'dual_clip': ...}} (credo has dual-clip, not TRL's two-sided clip)",
    "scale_rewards": "credo_overrides={'credit': {'scale': 'std' | 'batch_std' | 'none'}}",
    "importance_sampling_level": "credo_method='gspo' (a sequence-level ratio)",
    "top_entropy_quantile": "credo_method='s_trace' (credit keep_frac; mask_grad='trace_and_grad' masks gradients)",
    "off_policy_mask_threshold": "nothing: credo's losses have no off-policy sequence mask",
    "entropy_coef": "nothing: credo's losses have no entropy bonus",
    "use_adaptive_entropy": "nothing: credo's losses have no entropy bonus",
    "multi_objective_aggregation": "credo normalises the weighted sum of the rewards ('sum_then_normalize')",
}
"""GRPOConfig fields that change the advantages or the loss that credo replaces. A value other than TRL's
default would be silently ignored, so it is an error that says what to use instead."""


def check_trl_hooks() -> None:
    """A RuntimeError in one line unless TRL's `GRPOTrainer` has each of `PRIVATE_HOOKS` with the parameters credo
    passes it (and `_get_per_token_logps_and_entropies` every one of `_FORWARD_KEYS`)."""
    for name, parameters in PRIVATE_HOOKS.items():
        method = getattr(GRPOTrainer, name, None)
        wanted = parameters + (_FORWARD_KEYS if name == "_get_per_token_logps_and_entropies" else ())
        found = () if method is None else tuple(inspect.signature(method).parameters)[1:]  # after self
        if found[:len(parameters)] != parameters or not set(wanted) <= set(found):
            what = "has no such method" if method is None else f"takes ({', '.join(found)})"
            raise RuntimeError(
                f"trl {_trl.__version__}: GRPOTrainer.{name} {what}; credo.integrations.trl calls it with "
                f"({', '.join(wanted)}) and supports trl{TRL_VERSIONS}; install one with: pip install 'trl{TRL_VERSIONS}'"
            )


def check_trl_args(args: GRPOConfig, episodes: bool = False) -> None:
    """Refuse GRPOConfig settings whose effect credo's method replaces or cannot reproduce (`episodes`: or that
    the episode path, `credo_episodes`, does not honour: `credo.integrations.trl_episodes.EPISODE_ARGS`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for name, instead in _REPLACED_ARGS.items():
        if name in defaults and getattr(args, name) != defaults[name]:
            raise ValueError(
                f"GRPOConfig.{name} = {getattr(args, name)!r}: CredoGRPOTrainer replaces TRL's advantages and loss "
                f"with the credo method's, so this setting would be ignored; remove it (use {instead})"
            )
    if episodes:
        from credo.integrations.trl_episodes import EPISODE_ARGS

        for name, instead in EPISODE_ARGS.items():
            if name in defaults and getattr(args, name) != defaults[name]:
                raise ValueError(
                    f"GRPOConfig.{name} = {getattr(args, name)!r}: CredoGRPOTrainer(credo_episodes=...) samples "
                    f"multi-turn episodes with credo's generation backend, which does not honour it; remove it "
                    f"(use {instead})"
                )
    if args.beta != 0.0 and getattr(args, "use_bias_correction_kl", False):
        raise ValueError(
            "GRPOConfig.use_bias_correction_kl = True: credo's KL penalty (beta) is the plain k3 estimator without "
            "TRL's importance-sampling correction; set use_bias_correction_kl=False"
        )
    if args.use_vllm and args.vllm_importance_sampling_correction:
        raise ValueError(
            "GRPOConfig.vllm_importance_sampling_correction = True: credo's losses take no per-token correction for "
            "the vLLM sampler's log-probs; set vllm_importance_sampling_correction=False"
        )


def resolve_method(
    credo_method: str | Method,
    credo_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    conventions: str = "credo",
    args: GRPOConfig | None = None,
    episodes: bool = False,
) -> Method:
    """The credo method to run inside TRL: checked to fit TRL's i.i.d. groups (`episodes`: of multi-turn episodes),
    with TRL's `beta` as its KL weight, the `conventions="trl"` switches (the classes' "trl" declarations,
    `credo.integrations.conventions`, and `norm_len = max_completion_length`), then `credo_overrides`
    (`{"credit": {...}, "loss": {...}}`)."""
    check_choice("CredoGRPOTrainer", "credo_conventions", conventions, CONVENTIONS)
    method = get_method(credo_method) if isinstance(credo_method, str) else credo_method
    check_supported(method, episodes)
    overrides = dict(credo_overrides or {})
    unknown = sorted(set(overrides) - {"credit", "loss"})
    if unknown:
        raise ValueError(f"credo_overrides: unknown key(s) {', '.join(unknown)}; allowed: credit, loss")
    credit, loss = dict(overrides.get("credit") or {}), dict(overrides.get("loss") or {})
    if "kl_beta" in loss:
        raise ValueError("credo_overrides['loss']['kl_beta']: the KL weight is GRPOConfig.beta in TRL (TRL then "
                         "computes the reference log-probs); set beta there")
    base_credit, base_loss = convention_switches(method, conventions)
    base_loss["kl_beta"] = args.beta if args is not None else 0.0
    if conventions == "trl" and args is not None:
        base_loss["norm_len"] = args.max_completion_length  # TRL's dr_grpo divisor
    return method.with_overrides(estimator={**base_credit, **credit}, loss={**base_loss, **loss})


TRL_FIELDS = frozenset({"entropy", "ref_logp"})
"""The optional batch fields the adapter fills: the behaviour policy's entropies (one no-grad pass through TRL's
`_get_per_token_logps_and_entropies`, for methods that read them) and TRL's reference log-probs (`beta > 0`)."""


EPISODE_FIELDS = frozenset({"thought_ids", "turn_anchor", "turn_reward"})
"""The batch fields the episode path fills besides `TRL_FIELDS` (`CredoGRPOTrainer(credo_episodes=...)`): each
token's turn, the state each turn was taken from and the environment's turn rewards, from the environment the
rollout used (`credo.integrations.trl_episodes`)."""

_EPISODES_REMEDY = ("pass credo_episodes=TaskEpisodes(task) (credo.integrations.trl_episodes) to train on a credo "
                    "task's environment's episodes")


def refusal(method: Method, episodes: bool = False) -> str | None:
    """Why `method` cannot run inside TRL's GRPOTrainer, or None if it can (asked of the method's parts);
    `episodes`: the generation batch is multi-turn episodes (`CredoGRPOTrainer(credo_episodes=...)`)."""
    if not method.sampler.iid:
        return f"it draws {method.sampler.draws}, and TRL's GRPOTrainer samples i.i.d. groups only"
    if method.sampler.records:
        return (f"its sampler draws {method.sampler.draws}, recording {', '.join(sorted(method.sampler.records))}, "
                "which TRL's rollouts do not")
    missing = method.missing(TRL_FIELDS | (EPISODE_FIELDS if episodes else frozenset()))
    if missing and not episodes and not method.missing(TRL_FIELDS | EPISODE_FIELDS):
        return (f"it credits the turns of multi-turn episodes ({', '.join(sorted(method.needs & EPISODE_FIELDS))}), "
                f"which TRL's single-turn generation does not give; {_EPISODES_REMEDY}")
    if missing:
        return f"it needs {'; '.join(missing)}, which TRL's reward functions and rollouts do not provide"
    return None


def supported_methods(episodes: bool = False) -> list[str]:
    """The registered methods that run inside TRL's GRPOTrainer (`episodes`: on multi-turn episodes)."""
    return [name for name in METHODS if refusal(METHODS.get(name), episodes) is None]


def check_supported(method: Method, episodes: bool = False) -> None:
    """A clear error for a method that does not fit TRL's GRPOTrainer (see `refusal`)."""
    why = refusal(method, episodes)
    if why is not None:
        elsewhere = "" if _EPISODES_REMEDY in why else (
            f". Train it with credo's own trainer (`credo train`, method: {method.name}) or the verl integration "
            "(credo.integrations.verl)")
        raise ValueError(f"credo method {method.name!r} does not fit TRL's GRPOTrainer: {why}{elsewhere}")


class CredoGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` whose advantages and policy loss are a credo method's.

    Args (besides GRPOTrainer's own):
        credo_method: a method name (`credo methods` lists them) or a `credo.methods.Method`.
        credo_overrides: `{"credit": {...}, "loss": {...}}`: switches of the method's credit estimator and loss
            (e.g. `{"loss": {"decay": 0.9}}`); an unknown switch is an error.
        credo_conventions: "credo" (the method's defaults) or "trl" (TRL's: sample std with eps 1e-4, rows without a
            loss token counted in row means, Dr. GRPO divided by `max_completion_length`, no log-ratio clamp).
            `credo_overrides` apply after either.
        credo_episodes: a `credo.integrations.trl_episodes.TaskEpisodes`: each generation batch is its task's
            environment's multi-turn episodes (TRL's `rollout_func`; not with TRL's `rollout_func`, `tools` or
            `environment_factory`), observation tokens get no loss, and turn-level methods (mt_grpo, gigpo) read
            its turns. `reward_funcs` default to `[credo_episodes]`, the environment's episode reward.

    TRL's `beta` is the KL weight (credo's `kl_beta`; needs `use_bias_correction_kl=False`). GRPOConfig fields
    that shape TRL's own advantages or loss (`loss_type`, `epsilon`, `scale_rewards`, ...) must keep their
    defaults (see `check_trl_args`). Metrics go to TRL's logs with a `credo/` prefix: the credit metrics once
    per generation batch, the loss metrics per micro-batch (clip fractions, ratio statistics, trace weights).
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: GRPOConfig | None = None,
        *positional: Any,
        credo_method: str | Method = "grpo",
        credo_overrides: Mapping[str, Mapping[str, Any]] | None = None,
        credo_conventions: str = "credo",
        credo_episodes: Any = None,
        **kwargs: Any,
    ) -> None:
        check_trl_hooks()
        episodes = credo_episodes is not None
        if args is not None:  # fail before TRL loads anything
            check_trl_args(args, episodes)
        resolve_method(credo_method, credo_overrides, credo_conventions, args, episodes)
        self.credo_episodes = credo_episodes
        """The multi-turn episodes' source (`credo.integrations.trl_episodes.TaskEpisodes`), or None."""
        self._credo_rows: list[dict[str, Any]] | None = None
        if episodes:
            taken = sorted(k for k in ("rollout_func", "tools", "environment_factory") if kwargs.get(k))
            if taken:
                raise ValueError(f"CredoGRPOTrainer(credo_episodes=...) samples the episodes through TRL's "
                                 f"rollout_func; remove {', '.join(taken)}")
            kwargs["rollout_func"] = self._credo_rollout
            reward_funcs = [credo_episodes] if reward_funcs is None else reward_funcs
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        check_trl_args(self.args, episodes)
        self.credo_method = resolve_method(credo_method, credo_overrides, credo_conventions, self.args, episodes)
        """The credo method in use, with every override applied."""
        self._credo_needs_entropy = "entropy" in self.credo_method.behaviour_statistics
        self._credo_rewards_per_func: Tensor | None = None

    def _credo_rollout(self, prompts: list, trainer: GRPOTrainer) -> dict[str, list]:
        """TRL's `rollout_func`: the episodes of the generation batch's rows (`credo_episodes.rollout`)."""
        if self._credo_rows is None or len(self._credo_rows) != len(prompts):
            raise RuntimeError(f"TRL {_trl.__version__} called rollout_func outside _generate_and_score_completions; "
                               f"credo.integrations.trl supports trl{TRL_VERSIONS}")
        return self.credo_episodes.rollout(self._credo_rows, trainer)

    # ------------------------------------------------------------------------------- once per generation batch
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._credo_rewards_per_func = rewards_per_func  # (B_all, F), gathered over processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._credo_rows = inputs  # the rows the episodes are sampled for (TRL's rollout_func sees only prompts)
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._credo_rows = None
        return self._credo_credit(output, inputs)

    def _credo_credit(self, output: dict[str, Any], inputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Run credo's credit estimator on the whole generation batch and put its results into `output`."""
        mode = "train" if self.model.training else "eval"
        rewards_per_func, self._credo_rewards_per_func = self._credo_rewards_per_func, None
        if rewards_per_func is None:
            raise RuntimeError(f"TRL {_trl.__version__} scored this batch without `_calculate_rewards`; "
                               f"credo.integrations.trl supports trl{TRL_VERSIONS}")
        device = rewards_per_func.device
        # TRL's reward: the weighted sum of the reward functions; a row no function scored is NaN
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)  # (B_all,)
        scorable = ~torch.isnan(rewards_per_func).all(dim=1)  # (B_all,)
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        completion_mask = output["completion_mask"].bool()  # (B, T)
        loss_mask = completion_mask
        if output.get("tool_mask") is not None:  # tool output inside a completion: TRL trains no token of it
            loss_mask = completion_mask & output["tool_mask"].bool()
        local = {"ids": output["completion_ids"], "response": completion_mask, "loss": loss_mask}
        if self._credo_needs_entropy:
            local["entropy"] = self._credo_entropies(output, mode)
        full = {name: self._gather_rows(value) for name, value in local.items()}  # (B_all, T_all)
        turns, episode_metrics = ({}, {}) if self.credo_episodes is None else self._credo_turns(
            inputs, output.get("tool_mask"), loss_mask.shape[1], device)
        batch = RolloutBatch(
            response_ids=full["ids"],
            response_mask=full["response"].bool(),
            group_id=torch.arange(rewards.numel(), device=device) // group_size,
            rewards=torch.where(scorable, rewards, 0.0),
            old_logp=torch.zeros(full["ids"].shape, device=device),  # group estimators read no log-probs
            loss_mask=full["loss"].bool(),
            entropy=full.get("entropy"),
            **turns,
        )
        credited, metrics = credit_scorable(self.credo_method, batch, scorable)
        metrics.update(episode_metrics)
        trace_mask = credited.trace_mask
        if output.get("tool_mask") is not None:  # tool tokens are no actions: keep them out of the traces too
            trace_mask = (trace_mask if trace_mask is not None else batch.response_mask) & batch.loss_mask
        for name, value in self.credo_method.loss.normalisers(credited.loss_mask).items():
            output[f"credo_{name}"] = torch.tensor(value, device=device)  # 0-d: kept whole by TRL's split
        metrics["credit/unscorable_rows"] = float((~scorable).float().mean())
        for name, value in metrics.items():
            self._metrics[mode][f"credo/{name}"].append(value)

        rows = slice(self.accelerator.process_index * loss_mask.shape[0],
                     (self.accelerator.process_index + 1) * loss_mask.shape[0])
        width = loss_mask.shape[1]
        output["advantages"] = credited.advantages[rows, :width]  # (B, T): TRL accepts per-token advantages
        output["credo_loss_mask"] = credited.loss_mask[rows, :width]
        if trace_mask is not None:
            output["credo_trace_mask"] = trace_mask[rows, :width]
        output["credo_group_id"] = batch.group_id[rows]
        output["credo_rewards"] = batch.rewards[rows]
        self._credo_log_advantages(credited)
        return output

    def _credo_turns(self, inputs: list[dict[str, Any]], output_mask: Tensor | None, width: int,
                     device: torch.device) -> tuple[dict[str, Tensor], Metrics]:
        """The episodes' turn fields of the generation batch of all processes, each (B_all, T_all) on `device`
        (`thought_ids`, `thought_wrong`, `turn_reward`, `turn_anchor`), from the `credo_turns` TRL merged into each
        row (local rows `width` tokens wide), and the episodes' metrics. A TRL that dropped the episodes' `env_mask`
        (`output_mask`: TRL's `tool_mask`, None) would train observation tokens: an error."""
        from accelerate.utils import gather_object

        from credo.integrations.trl_episodes import anchor_ids, turn_tensors

        if output_mask is None or any("credo_turns" not in row for row in inputs):
            what = "kept no env_mask as its tool_mask" if output_mask is None else "merged no extra field into the rows"
            raise RuntimeError(f"TRL {_trl.__version__} {what} of rollout_func's output, which credo_episodes relies "
                               f"on; credo.integrations.trl supports trl{TRL_VERSIONS}")
        turns = [row["credo_turns"] for row in inputs]
        local = {k: v.to(device) for k, v in turn_tensors(turns, width).items()}
        thought_ids = self._gather_rows(local["thought_ids"] + 1) - 1  # -1 after each row, across processes too
        fields = {
            "thought_ids": thought_ids,
            "thought_wrong": self._gather_rows(local["thought_wrong"]).bool(),
            "turn_reward": self._gather_rows(local["turn_reward"]),
            "turn_anchor": anchor_ids(gather_object([t["anchors"] for t in turns]), thought_ids),
        }
        ended = {k: self.accelerator.gather(local[k]).float().mean().item() for k in ("truncated", "failed")}
        return fields, {"episodes/truncated_frac": ended["truncated"], "episodes/failed_frac": ended["failed"]}

    def _credo_entropies(self, output: dict[str, Any], mode: str) -> Tensor:
        """(B, T) the behaviour policy's per-token entropies: one no-grad pass over the generation batch."""
        from trl.models.utils import disable_gradient_checkpointing

        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            _, entropies, _ = self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, output["completion_ids"].shape[1], batch_size=batch_size,
                compute_entropy=True, **{key: output.get(key) for key in _FORWARD_KEYS},
            )
        return torch.where(output["completion_mask"].bool(), entropies.float(), 0.0)

    def _gather_rows(self, value: Tensor) -> Tensor:
        """(B, T) local rows -> (B_all, T_all) rows of all processes, right-padded with 0 to the widest."""
        if self.accelerator.num_processes == 1:
            return value
        value = value.long() if value.dtype == torch.bool else value
        return self.accelerator.gather(self.accelerator.pad_across_processes(value, dim=1, pad_index=0))

    def _credo_log_advantages(self, credited: RolloutBatch) -> None:
        """Show credo's advantages (row mean over the loss mask) in TRL's completions table instead of TRL's."""
        mask = credited.loss_mask
        per_row = (credited.advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # (B_all,)
        logged = self._logs["advantages"]
        for _ in range(min(per_row.numel(), len(logged))):
            logged.pop()
        logged.extend(per_row.tolist())

    # ------------------------------------------------------------------------------------- every micro-batch
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        logp, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.shape[1], compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled, **{key: inputs.get(key) for key in _FORWARD_KEYS},
        )  # (B, T) each
        old_logp = inputs.get("old_per_token_logps")
        batch = RolloutBatch(
            response_ids=completion_ids,
            response_mask=completion_mask.bool(),
            group_id=inputs["credo_group_id"],
            rewards=inputs["credo_rewards"],
            old_logp=logp.detach() if old_logp is None else old_logp,
            loss_mask=inputs["credo_loss_mask"],
            trace_mask=inputs.get("credo_trace_mask"),
            ref_logp=inputs.get("ref_per_token_logps"),
            advantages=inputs["advantages"],
        )
        accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        share = (accumulation / self.args.steps_per_generation if mode == "train" else 1.0)
        share /= self.accelerator.num_processes
        normalisers = {name: float(inputs[f"credo_{name}"]) * share
                       for name in ("num_tokens", "num_rows") if f"credo_{name}" in inputs}
        out = self.credo_method.policy_loss(logp, batch, **normalisers)
        loss = out.loss
        if self.aux_loss_enabled:  # MoE load balancing, scaled for accumulation like TRL's
            loss = loss + self.router_aux_loss_coef * aux_loss / (accumulation if mode == "train" else 1.0)
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())
        metrics = {k: v for k, v in out.metrics.items() if k != "loss/policy"}  # TRL logs the summed `loss`
        mask = completion_mask if inputs.get("tool_mask") is None else completion_mask * inputs["tool_mask"]
        metrics["entropy"] = float((entropies.detach() * mask).sum() / mask.sum().clamp(min=1))  # TRL's metric
        self._credo_log_loss_metrics(metrics, mode)
        return loss

    def _credo_log_loss_metrics(self, metrics: Metrics, mode: str) -> None:
        """Append one micro-batch's loss metrics, reduced over processes (max for maxima, else mean)."""
        names = sorted(metrics)
        values = torch.tensor([[metrics[n] for n in names]], device=self.accelerator.device)
        values = self.accelerator.gather(values)  # (processes, K)
        for i, name in enumerate(names):
            column = values[:, i]
            value = column.max() if name.endswith(("max", "p99")) else column.mean()
            key = "entropy" if name == "entropy" else f"credo/{name}"  # TRL's own key for the policy entropy
            self._metrics[mode][key].append(float(value))


def credit_scorable(method: Method, batch: RolloutBatch, scorable: Tensor) -> tuple[RolloutBatch, Metrics]:
    """`method.credit(batch)` on the rows some reward function scored; the others (TRL's unscorable rows, whose
    reward is NaN) stay out of the group statistics and get advantage 0 but keep their loss mask, as in TRL."""
    if bool(scorable.all()):
        return method.credit(batch)
    rows = scorable.nonzero().squeeze(1)
    advantages = torch.zeros(batch.response_mask.shape, device=batch.rewards.device)
    if rows.numel() == 0:
        return batch.replace(advantages=advantages), {}
    credited, metrics = method.credit(batch.select(rows))
    loss_mask = batch.loss_mask.index_copy(0, rows, credited.loss_mask)
    trace_mask = None
    if credited.trace_mask is not None:
        trace_mask = batch.response_mask.index_copy(0, rows, credited.trace_mask)
    advantages = advantages.index_copy(0, rows, credited.advantages.to(advantages.dtype))
    return batch.replace(advantages=advantages, loss_mask=loss_mask, trace_mask=trace_mask), metrics


class TaskReward:
    """A credo task's verifier as a TRL reward function, and its problems as TRL datasets.

        reward = TaskReward(ArithTask())
        train = reward.dataset(itertools.islice(reward.task.train_problems(seed=0), 64))
        CredoGRPOTrainer(..., reward_funcs=[reward], train_dataset=train)

    Each dataset row carries a `credo_problem` key that TRL passes back to the reward function, which
    looks the problem up and returns `task.verify(problem, completion).reward`.
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.__name__ = f"credo_{task.name}"  # TRL names the reward metrics after it
        self._problems: list[Problem] = []

    def dataset(self, problems: Iterable[Problem], *, chat: bool = True):
        """A `datasets.Dataset` of the problems: conversational prompts (TRL applies the chat template; a chat
        prompt keeps its whole conversation, system turn included) or, with `chat=False`, plain text for
        tokenizers without one."""
        from datasets import Dataset

        problems = list(problems)
        start = len(self._problems)
        self._problems.extend(problems)
        prompts = [conversation(p.prompt) if chat else p.prompt for p in problems]
        return Dataset.from_dict({"prompt": prompts, "credo_problem": list(range(start, start + len(problems)))})

    def __call__(self, completions: list, credo_problem: list[int], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [self.task.verify(self._problems[i], text).reward for i, text in zip(credo_problem, texts)]


def conversation(prompt: str) -> list[dict[str, str]]:
    """A problem's prompt as TRL's conversational format: a chat prompt's messages, else one user message."""
    messages = getattr(prompt, "messages", None)
    return [dict(m) for m in messages] if messages else [{"role": "user", "content": str(prompt)}]


__all__ = [
    "CONVENTIONS", "TRL_VERSIONS", "CredoGRPOTrainer", "TaskReward", "check_supported", "check_trl_args",
    "credit_scorable", "resolve_method",
]
