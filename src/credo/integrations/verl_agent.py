"""verl agent loops for credo's reset methods (RRPO, SRPO) and revision methods (IBPO), verl 0.9.1.

verl's v1 trainer runs `rollout.n` sessions of an agent loop per prompt, all in one `AgentLoopWorker` (one
event loop), each returning one row. A reset or revision group is a property of the whole prompt (the
first failed draw is the seed, base and suffix groups are normalised separately, a failure is revised
against its siblings), so the `n` sessions of a prompt share one group build:

1. the first session to arrive starts credo's own sampler (`credo.rollout.samplers.resets.sample_resets` or
   `credo.rollout.samplers.revisions.sample_revisions`: draw rounds, seed planning, localisation, continuations
   from `prompt + prefix`, revisions, edit masks) in a worker thread, against `VerlBackend`, whose
   `generate` sends every request to verl's rollout servers concurrently on the worker's event loop (all
   requests of a group share one sticky request id, so the servers' prefix cache serves the shared
   prompt and prefixes), and `VerlTask`, which scores with verl's reward function;
2. credo's credit estimator of the method runs on the group (`credited_rows`);
3. each session returns one row (in arrival order): the response (a reset continuation *with* its kept
   prefix), `response_mask` = the row's trained tokens (0 on the kept prefix, or IBPO's edited tokens),
   and `reward_score` = the row's advantage. The verl estimator registered for the method
   (`credo.integrations.verl.advantage_fn`) spreads that advantage over `response_mask`, and verl's loss
   mask is `response_mask`, so the loss sees exactly credo's advantages and loss mask.

The row's verifier reward, verdict and prefix length travel in `extra_fields["reward_extra_info"]`
(`credo_reward`, `credo_correct`, `credo_prefix_len`, `credo_revision_success`); verl's own training score
metrics show the advantages. A greedy request (`temperature == 0`, verl's validation default) is an
evaluation: it gets verl's plain single-turn rollout, without resets or revisions.

Limits: the rows' rollout log-probs are not recorded (verl's rollout correction needs
`rollout.calculate_log_probs`); scoring uses verl's rule-based reward function (`reward.custom_reward_function`
or verl's `default_compute_score`), not a reward model; the oracle localiser needs a step checker (none in
verl); IBPO's edit mask can only be trained with `norm="trained"` (verl's estimator carries one advantage
per row), so the agent loop's `edit_mask` option defaults to "off".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib.util
import inspect
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from credo.extras import require
from credo.methods import Method, get_method
from credo.rollout.generate import Completions, cut_response, encode_prompts
from credo.rollout.groups import Rollout
from credo.rollout.reset_plan import SPLITS
from credo.rollout.samplers import RolloutConfig
from credo.rollout.samplers.resets import ResetConfig
from credo.rollout.samplers.revisions import RevisionConfig
from credo.tasks import Problem, Task, Verdict

if importlib.util.find_spec("verl") is not None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
else:  # credo[verl] is not installed: the module imports (docs, doctests), its agent loops refuse to start

    class SingleTurnAgentLoop:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            require("verl", "verl", "the verl agent loops")

    AgentLoopOutput = None  # type: ignore[assignment,misc]

_POOL = ThreadPoolExecutor(max_workers=int(os.environ.get("CREDO_VERL_THREADS", "256")),
                           thread_name_prefix="credo-verl")
"""Group builds block a thread while their requests run on the event loop: one thread per group in flight."""


# --------------------------------------------------------------------------------------------------
# credo's backend and task protocols over verl's rollout servers and reward function
class VerlBackend:
    """credo's generation backend (`tokenizer`, `generate(prompts, ...) -> Completions`) over verl's rollout
    servers, for credo's samplers running in a worker thread.

    `prompts` maps credo's encoding of the problem (`encode_prompts`: one user message) to verl's prompt ids
    (the dataset's messages under verl's chat-template builder), so every draw uses verl's prompt. A request
    that extends verl's prompt (a continuation after a kept prefix) may generate at most what is left of
    `response_length`.
    """

    def __init__(self, server_manager: Any, tokenizer: Any, loop: asyncio.AbstractEventLoop, *, request_id: str,
                 prompts: Mapping[tuple[int, ...], list[int]], response_length: int,
                 sampling_params: Mapping[str, Any] | None = None, unique_request_ids: bool = False) -> None:
        self.server_manager, self.tokenizer, self.loop = server_manager, tokenizer, loop
        self.request_id, self.unique = request_id, unique_request_ids
        self.prompts = {tuple(k): list(v) for k, v in prompts.items()}
        self.response_length = response_length
        self.params = {k: v for k, v in (sampling_params or {}).items()
                       if k not in ("temperature", "top_p", "logprobs", "max_tokens", "max_new_tokens", "stop",
                                    "include_stop_str_in_output")}
        self.requests = 0
        eos = tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) - {None}
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(self.eos) if self.eos else 0)

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, repeat: int = 1,
                 stop: Sequence[str] | None = None) -> Completions:
        """`repeat` responses per prompt from verl's servers; with `stop` (a multi-turn episode's turn marker) each
        ends at the end of the first stop string, kept: the servers are asked to stop there (vLLM's `stop`,
        `include_stop_str_in_output`) and every reply is cut there as credo's own backends cut (`cut_response`)."""
        requests = [self.prompts.get(tuple(p), list(p)) for p in prompts for _ in range(repeat)]
        budgets = [max(1, min(max_new_tokens, self._left(r))) for r in requests]
        params = dict(self.params, temperature=0.0 if greedy else temperature, top_p=1.0 if greedy else top_p,
                      logprobs=False)
        if greedy:
            params["top_k"] = -1
        if stop:
            params.update(stop=list(stop), include_stop_str_in_output=True)
        outputs = on_loop(self._generate(requests, budgets, params), self.loop)
        responses = [list(o.token_ids)[:budget] for o, budget in zip(outputs, budgets)]
        truncated = [len(r) >= budget and (not r or r[-1] not in self.eos) for r, budget in zip(responses, budgets)]
        if stop:
            cut = [cut_response(r, self.eos, self.pad, self.tokenizer, list(stop)) for r in responses]
            responses, truncated = [r for r, _ in cut], [not ended and t for (_, ended), t in zip(cut, truncated)]
        texts = [self.tokenizer.decode(r, skip_special_tokens=True) for r in responses]
        return Completions.from_lists(requests, responses, texts, truncated, self.pad)

    def _left(self, request: list[int]) -> int:
        """Tokens of the response budget left after the part of `request` that extends a verl prompt."""
        for prompt in self.prompts.values():
            if len(request) >= len(prompt) and request[: len(prompt)] == prompt:
                return self.response_length - (len(request) - len(prompt))
        return self.response_length

    async def _generate(self, requests: list[list[int]], budgets: list[int], params: dict[str, Any]) -> list[Any]:
        calls = []
        for request, budget in zip(requests, budgets):
            self.requests += 1
            rid = f"{self.request_id}-{self.requests}" if self.unique else self.request_id
            calls.append(self.server_manager.generate(request_id=rid, prompt_ids=request,
                                                      sampling_params=dict(params, max_tokens=budget)))
        return await asyncio.gather(*calls)


class VerlTask(Task):
    """credo's task protocol over a verl reward function `score_fn(data_source, solution_str, ground_truth,
    extra_info)`, which returns a score or a dict with `score` (and optionally `acc`). A response is
    correct when `acc` says so, else when its score reaches `correct_at`. The problem's `meta` holds
    `data_source`, `ground_truth` and `extra_info` (`problem_from_row`)."""

    name = "verl"
    checks_steps = False

    def __init__(self, score_fn: Any, loop: asyncio.AbstractEventLoop | None = None, correct_at: float = 1.0):
        self.score_fn, self.loop, self.correct_at = score_fn, loop, correct_at

    def verify(self, problem: Problem, response: str) -> Verdict:
        meta = problem.meta
        result = self.score_fn(data_source=meta.get("data_source"), solution_str=response,
                               ground_truth=meta.get("ground_truth"), extra_info=meta.get("extra_info"))
        if inspect.isawaitable(result):
            if self.loop is None:
                raise ValueError("an async reward function needs the agent loop's event loop")
            result = on_loop(_awaited(result), self.loop)
        if isinstance(result, Mapping):
            score = float(result["score"])
            correct = bool(result["acc"]) if "acc" in result else score >= self.correct_at
        else:
            score = float(result)
            correct = score >= self.correct_at
        return Verdict(reward=score, correct=correct)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def on_loop(coroutine: Any, loop: asyncio.AbstractEventLoop, poll_s: float = 1.0) -> Any:
    """The result of `coroutine` run on the agent-loop worker's event loop `loop`, from a worker thread. A
    `RuntimeError` if the loop stops first (its worker shut down, a failed session's caller returned): a thread
    waiting on a coroutine that a stopped loop never runs would wait, and block the process's exit, for ever."""
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    while True:
        try:
            return future.result(timeout=poll_s)
        except concurrent.futures.TimeoutError:
            if not loop.is_running():
                future.cancel()
                raise RuntimeError("the agent loop's event loop stopped while credo waited on it") from None


class _OneProblem:
    """credo's problem stream for one prompt."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def take(self, n: int) -> list[Problem]:
        return [self.problem] * n


def problem_from_row(row: Mapping[str, Any]) -> Problem:
    """credo's `Problem` for a verl dataset row: the last user message's text as the problem (credo's
    localisation and revision prompts show it), the reward function's inputs in `meta`."""
    messages = list(row.get("raw_prompt", []))
    users = [m for m in messages if m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise ValueError("credo's verl agent loops need a text user message in the row's raw_prompt")
    reward_model = row.get("reward_model") or {}
    ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    meta = {"data_source": row.get("data_source"), "ground_truth": ground_truth, "extra_info": row.get("extra_info")}
    return Problem(prompt=users[-1]["content"], answer=str(ground_truth), meta=meta)


# --------------------------------------------------------------------------------------------------
# A group's rows, credited by credo
@dataclass(frozen=True)
class CreditedRow:
    """One trained row of a group: what the agent loop returns to verl."""

    prompt: list[int]
    response: list[int]
    """The response token ids (a reset continuation: its kept prefix, then the continuation)."""
    mask: list[int]
    """1 on the tokens that train (credo's loss mask): verl's `response_mask`."""
    advantage: float
    """The row's advantage on its trained tokens (credo's estimator over the group)."""
    reward: float
    correct: bool
    prefix_len: int
    revision_success: float


def credited_rows(rollout: Rollout, method: Method) -> list[CreditedRow]:
    """Run `method`'s credit estimator on a group's rollout and split it into rows.

    A `ValueError` if the method's credit is not one advantage per row over its loss mask (IBPO's edited-token
    credit with `norm="response"`): verl's estimator interface carries no more than that."""
    c = rollout.completions
    B = c.response_ids.shape[0]
    credited, _ = method.credit(rollout.batch())
    mask, adv = credited.loss_mask, credited.advantages
    first = mask.float().argmax(dim=1, keepdim=True)  # (B, 1): the first trained token
    row_adv = adv.gather(1, first).squeeze(1) * mask.any(dim=1)  # (B,)
    if not torch.equal(adv, row_adv.unsqueeze(1) * mask):
        raise ValueError(f"credo method {method.name!r}: its credit is not one advantage per row over the loss mask, "
                         "which is all verl's advantage estimator can carry")
    prefix = rollout.records.get("prefix_len", torch.zeros(B, dtype=torch.long))
    success = rollout.records.get("revision_success", torch.zeros(B))
    rows = []
    for b in range(B):
        n = int(c.response_mask[b].sum())
        rows.append(CreditedRow(
            prompt=c.prompt_ids[b][c.prompt_mask[b]].tolist(), response=c.response_ids[b, :n].tolist(),
            mask=mask[b, :n].long().tolist(), advantage=float(row_adv[b]), reward=float(rollout.rewards[b]),
            correct=bool(rollout.verdicts[b].correct), prefix_len=int(prefix[b]), revision_success=float(success[b]),
        ))
    return rows


# --------------------------------------------------------------------------------------------------
# The agent loops
GROUP_SIZE_KEY = "actor_rollout_ref.rollout.n"
"""verl's sessions per prompt: the rows of one credo group."""


def _plain(value: Any) -> Any:
    """Plain dicts and lists for options that verl's hydra instantiation hands over as OmegaConf containers."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


@dataclass
class _Build:
    future: asyncio.Future
    taken: int = 0


_BUILDS: dict[tuple[str, Any], _Build] = {}


class CredoAgentLoop(SingleTurnAgentLoop):
    """The shared part of the reset and revision agent loops: one group build per prompt (module docstring).

    Constructor keywords besides verl's (from the agent-loop registry entry or an `agent_loop_config_path`
    YAML): `method` (a credo method name), `estimator` / `loss` (switch overrides), `reward_errors`
    ("raise" | "zero": a reward function that raises stops the step or scores 0), `correct_at` (the score
    from which a response counts as correct when the reward function gives no `acc`; default 1.0).
    """

    def __init__(self, *args: Any, method: str, estimator: Mapping[str, Any] | None = None,
                 loss: Mapping[str, Any] | None = None, reward_errors: str = "raise", correct_at: float = 1.0,
                 **kwargs: Any) -> None:
        options = {name: _plain(value) for name, value in self._options(kwargs).items()}
        super().__init__(*args, **kwargs)
        self.method = get_method(method, estimator=_plain(estimator), loss=_plain(loss))
        if globals().get(self.method.sampler.verl_agent_loop or "") not in type(self).__mro__:
            raise ValueError(f"{type(self).__name__} does not run the {self.method.sampler.name} sampler of credo "
                             f"method {method!r} (`Sampler.verl_agent_loop`: {self.method.sampler.verl_agent_loop})")
        self.reward_errors, self.correct_at = reward_errors, correct_at
        self.configure(options)

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {}

    @classmethod
    def check_sessions(cls, options: Mapping[str, Any], n: int) -> None:
        """`ValueError` unless `n` sessions per prompt make one group of this loop's sampler, with the loop's
        `options` (its agent-loop registry entry or YAML). The loop checks it when verl builds it, credo's config
        check (`credo.integrations.verl.validate_config`) before verl starts."""

    def configure(self, options: dict[str, Any]) -> None:
        """Validate the sampler's options; raises early, before any rollout."""

    @property
    def group_size(self) -> int:
        return int(self.rollout_config.n)

    def problem_and_task(self, kwargs: Mapping[str, Any]) -> tuple[Problem, Any]:
        """The credo problem of a dataset row and the task that scores it (verl's reward function)."""
        from verl.trainer.ppo.reward import get_custom_reward_fn
        from verl.utils.reward_score import default_compute_score

        score_fn = get_custom_reward_fn(self.config) or default_compute_score
        return problem_from_row(kwargs), VerlTask(score_fn, self.loop, self.correct_at)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        if not sampling_params.get("temperature"):
            return await super().run(sampling_params, **kwargs)  # evaluation: a plain rollout
        key = (str(kwargs["uid"]), kwargs.get("global_steps"))
        build = _BUILDS.get(key)
        if build is None:
            build = _BUILDS[key] = _Build(asyncio.ensure_future(self._group(sampling_params, kwargs)))
        index = build.taken
        build.taken += 1
        if build.taken >= self.group_size:
            del _BUILDS[key]
        rows = await asyncio.shield(build.future)
        if index >= len(rows):
            raise ValueError(f"prompt {key[0]}: {build.taken} sessions for a group of {len(rows)} rows; "
                             f"set actor_rollout_ref.rollout.n={len(rows)}")
        return self.output(rows[index])

    async def _group(self, sampling_params: dict[str, Any], kwargs: Mapping[str, Any]) -> list[CreditedRow]:
        problem, task = self.problem_and_task(kwargs)
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        backend = VerlBackend(
            self.server_manager, self.tokenizer, asyncio.get_running_loop(), request_id=f"credo-{kwargs['uid']}",
            prompts={tuple(encode_prompts(self.tokenizer, [problem.prompt])[0]): prompt_ids},
            response_length=int(self.rollout_config.response_length), sampling_params=sampling_params,
            unique_request_ids=bool(getattr(self.rollout_config, "full_determinism", False)),
        )
        config = RolloutConfig(
            prompts_per_step=1, group_size=max(2, self.group_size), max_new_tokens=int(self.rollout_config.response_length),
            temperature=float(sampling_params["temperature"]), top_p=float(sampling_params.get("top_p") or 1.0),
            reward_errors=self.reward_errors, **self.sampler_config(),
        )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_POOL, self.build_rows, backend, task, problem, config)

    def sampler_config(self) -> dict[str, Any]:
        """The `resets` / `revisions` section of credo's rollout config."""
        raise NotImplementedError

    def build_rows(self, backend: VerlBackend, task: Any, problem: Problem, config: RolloutConfig) -> list[CreditedRow]:
        """credo's sampler and credit estimator for one prompt (runs in a worker thread)."""
        return credited_rows(self.method.sampler.sample(backend, task, _OneProblem(problem), config), self.method)

    def output(self, row: CreditedRow):
        info = {"credo_reward": row.reward, "credo_correct": float(row.correct), "credo_prefix_len": row.prefix_len,
                "credo_revision_success": row.revision_success}
        return AgentLoopOutput(
            prompt_ids=row.prompt, response_ids=row.response, response_mask=row.mask, reward_score=row.advantage,
            num_turns=2, metrics={}, extra_fields={"reward_extra_info": info, "turn_scores": [], "tool_rewards": []},
        )


class ResetAgentLoop(CredoAgentLoop):
    """RRPO / SRPO reset groups (`credo.rollout.samplers.resets`). Option `resets`: credo's `ResetConfig` fields
    (`split`, `max_draws`, `localiser` random | self, `localiser_temperature`, `localiser_max_tokens`,
    `localiser_prompt`, `thoughts`: delimiter, answer marker, caps). `rollout.n` must be the split's rows
    (8 for every split). The thought budget is capped at verl's `response_length`."""

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"resets": kwargs.pop("resets", None)}

    def configure(self, options: dict[str, Any]) -> None:
        resets = ResetConfig(**(options["resets"] or {}))
        budget = min(resets.thoughts.budget_tokens, int(self.rollout_config.response_length))
        self.resets = resets.model_copy(update={"thoughts": resets.thoughts.model_copy(update={"budget_tokens": budget})})
        options = RolloutConfig(resets=self.resets)
        try:
            self.method.sampler.check(options, checks_steps=False)
        except ValueError as error:
            raise ValueError(f"{error}; verl's reward functions have none") from None
        self.method = self.method.for_run(options)  # the `nomask` split, as credo's trainer sets it
        self.check_sessions({"resets": {"split": self.resets.split}}, self.group_size)

    @classmethod
    def check_sessions(cls, options: Mapping[str, Any], n: int) -> None:
        """A reset split trains a fixed number of rows per prompt."""
        split = ResetConfig(**(options.get("resets") or {})).split
        if n != SPLITS[split].rows:
            raise ValueError(f"{GROUP_SIZE_KEY}={n}: reset split {split} trains {SPLITS[split].rows} rows per prompt; "
                             f"set {GROUP_SIZE_KEY}={SPLITS[split].rows}")

    def sampler_config(self) -> dict[str, Any]:
        return {"resets": self.resets}



class RevisionAgentLoop(CredoAgentLoop):
    """IBPO revision groups (`credo.rollout.samplers.revisions`). Options: `revisions` (credo's `RevisionConfig`: `k`,
    `prompt`, `max_new_tokens`, `temperature`, `rewrite`) and `edit_mask`: "off" (default: shaped rewards,
    every response token trains) | "trained" (repaired failures train on their edited tokens only, each row
    normalised by its trained tokens: credo's `RevisionAdvantage(norm="trained")`)."""

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"revisions": kwargs.pop("revisions", None), "edit_mask": kwargs.pop("edit_mask", "off")}

    def configure(self, options: dict[str, Any]) -> None:
        self.revisions = RevisionConfig(**(options["revisions"] or {}))
        self.check_sessions(options, self.group_size)
        if options["edit_mask"] not in ("off", "trained"):
            raise ValueError(f"edit_mask must be 'off' or 'trained', got {options['edit_mask']!r}")
        trained = options["edit_mask"] == "trained"
        self.method = dataclasses.replace(self.method, estimator=dataclasses.replace(
            self.method.estimator, use_edit_mask=trained, norm="trained" if trained else self.method.estimator.norm))

    def sampler_config(self) -> dict[str, Any]:
        return {"revisions": self.revisions}

    @classmethod
    def check_sessions(cls, options: Mapping[str, Any], n: int) -> None:
        """A failure is revised against its siblings."""
        if n < 2:
            raise ValueError(f"{GROUP_SIZE_KEY}={n}: IBPO revises a failure against its siblings; "
                             f"set {GROUP_SIZE_KEY} >= 2")
