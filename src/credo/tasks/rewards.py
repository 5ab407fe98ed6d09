"""Bring your own reward: reward functions named in the task config, on any task (`task.reward`).

    task:
      name: dataset
      path: data/train.parquet
      reward:                                     # or one function: reward: "my_rewards:accuracy"
        - {function: "my_rewards:accuracy", weight: 1.0}
        - {function: "my_rewards:format", weight: 0.2}
        - {function: "my_rewards:compute_score", style: verl}
      correct_at: 1.0

`function` is "package.module:function" (a dotted attribute after the colon also works, "mod:Class.method"),
importable from the working directory (it is put on `sys.path` for the import), or "path/to/file.py:function"
(relative to the working directory). The module is imported when a config that trains on it is validated
(`credo train`, `--resume`; `credo config` and `credo eval` only with `--load-rewards`, and otherwise check the
name's form without importing), so a missing module or function, or a function that cannot take the arguments
below, is a config error naming the path.

Two calling conventions (`style`):

- "trl" (the default), TRL's reward functions, called as TRL's `GRPOTrainer` calls them: once per batch of rows,
  `fn(prompts=[...], completions=[...], **columns) -> list[float | None]`, one value per row. On a
  conversational dataset (a row's prompt is a list of chat messages, a `credo.tasks.ChatPrompt`) `prompts` are
  the message lists and each completion is `[{"role": "assistant", "content": text}]`, as TRL gives them
  (TRL's `trl.rewards` functions read `completion[0]["content"]`); on a plain-text dataset both are strings.
  `columns` are the rows' other fields, one list per column (TRL style): `answer` (the ground truth,
  a string) and `difficulty` (the eval bucket), plus each key of the problems' `meta`, which for the
  `dataset` task is every column of the row but the prompt's, raw, under its own name (such a column wins
  over `answer`/`difficulty` of the same name); a row that lacks a column gets None in its list. A function
  without `**kwargs` is passed only the columns it names. None (or NaN) means "no reward" for that row. An
  `async def` function (or a callable whose `__call__` is one) is awaited; a batch's async functions run
  concurrently, as TRL runs them. TRL 1.16's other keywords are passed to a function that takes them (or
  `**kwargs`): `completion_ids` (each response's token ids), `trainer_state` (a `RewardState`: `global_step`,
  the optimiser steps done, and `max_steps`, the run's), `log_metric(name, value)` (averaged into the step's record under
  `name`) and `log_extra(column, values)` (one value per row, shown beside the step's logged samples); what
  functions log while the run evaluates is not kept. Each function's mean and standard deviation over a step's responses are
  logged as TRL names them, `rewards/<name>/mean` and `rewards/<name>/std` (`<name>` the function's
  `__name__`, through `functools.partial`, or a callable instance's class name).
- "verl", verl's `compute_score`: called once per row, `fn(data_source=..., solution_str=response,
  ground_truth=answer, extra_info=...) -> float | dict` (a dict's "score" key). `data_source` is the row's
  "data_source" column when it has one, else the task's name; `extra_info` the row's "extra_info" column
  when it has one, else all its columns (as above).

Instead of a function, an entry may name a reward model, `{model: path/to/reward_model, weight: ...}`: a
sequence-classification model scored as TRL's GRPOTrainer scores one (`credo.tasks.reward_model`), a trl-style
function here.

The reward is the weighted sum (`weight`, default 1; TRL's `reward_weights`) of the values that are not
None; a row that every function leaves without a value gets 0, with `Verdict.unscored` set (a warning says
how many). The custom reward replaces the task's own scoring of the reward, and `correct` is
`reward >= correct_at`. Step checkers stay a task feature: on a task that checks steps (`arith`), the task's
own verifier still gives `first_wrong_step` and `error_kind`.

Before anything is sampled, `credo train` calls each function once on a batch of two rows, the first training row
twice with its answer as the response (`CustomReward.check_shapes`): one that cannot take the rows' shape, or returns
other than one value per row, fails there, naming the shape.

A function that raises or returns something other than a number or None (or, in the trl style, not a list
with one value per row) follows `rollout.reward_errors`: "raise" stops with a one-line error naming the
function and the row's prompt, "zero" scores that row 0 with a warning and counts it in
`rollout/reward_errors`. A trl-style function that raises on a batch is called again row by row, to find the
rows at fault (the others keep their values); one that returns a batch of the wrong shape fails every row of it.
Responses are only ever passed to the functions as strings: credo never evaluates them.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import logging
import math
import numbers
import os
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from credo.schema import Section
from credo.tasks.base import Problem, Task, Verdict, describe_error, short_repr
from credo.tasks.chat import ChatPrompt
from credo.tasks.reward_model import RewardModel, reward_model_directory

log = logging.getLogger(__name__)

TRL_PARAMETERS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""The keywords TRL's GRPOTrainer passes a reward function besides the rows' columns (a column of one of these names
is not passed: TRL's own wins)."""


@dataclass(frozen=True)
class RewardState:
    """What a reward function reads from TRL's `trainer_state` (a `transformers.TrainerState`), as credo's trainer
    has it, in optimiser steps as TRL counts them: those done before this batch and the run's (`train.steps x
    optim.minibatches x optim.epochs`)."""

    global_step: int = 0
    max_steps: int = 0


class RewardFunction(Section):
    """One reward function of `task.reward` (or a reward model) and its weight."""

    function: str | None = Field(None, exclude_if=lambda value: value is None)
    """"package.module:function" (importable from the working directory) or "path/to/file.py:function"."""
    model: str | None = Field(None, exclude_if=lambda value: value is None)
    """Instead of `function`: a sequence-classification reward model's directory.

    Scored as TRL's GRPOTrainer scores one (`credo.tasks.reward_model`)."""
    weight: float = 1.0
    """Its weight in the reward, a weighted sum (TRL's `reward_weights`); negative weights are penalties."""
    style: Literal["trl", "verl"] = "trl"
    """How it is called: "trl" (TRL's reward functions, per batch) or "verl" (verl's `compute_score`, per row).

    "trl": `fn(prompts, completions, **columns) -> list[float | None]`; "verl": `compute_score(data_source,
    solution_str, ground_truth, extra_info) -> float | dict` (its "score")."""

    @model_validator(mode="after")
    def _loadable(self) -> RewardFunction:
        self.check_form()
        if self.model is not None:
            reward_model_directory(self.model)
        else:
            check_signature(load_function(self.function), self.function, self.style)
        return self

    def check_form(self) -> None:
        """A ValueError unless exactly one of `function` and `model` is given, and `style` only with a function."""
        if (self.function is None) == (self.model is None):
            raise ValueError("a reward entry names either a function or a model: "
                             + ("not both" if self.function is not None else "give one"))
        if self.model is not None and "style" in self.model_fields_set:
            raise ValueError(f"reward model {self.model!r}: style applies to functions only (a model is scored as "
                             "TRL scores one)")

    @property
    def name(self) -> str:
        """The function's path, or the reward model's."""
        return self.function if self.model is None else f"{self.model} (reward model)"


class RewardOptions(Section):
    """The options every task takes for a custom reward (`credo.tasks.rewards`)."""

    reward: list[RewardFunction] | None = Field(None, exclude_if=lambda value: value is None)
    """Custom reward functions replacing the task's own reward ("pkg.mod:fn", or a list of {function, weight, style}).

    One function ("my_rewards:accuracy"), or a list of `{function, weight, style}` whose weighted sum is the
    reward; None: the task's own scoring. See `credo.tasks.rewards` for the signatures."""
    correct_at: float = Field(1.0, exclude_if=lambda value: value == 1.0)
    """With a custom `reward`: a response is correct when its reward is at least this."""

    @field_validator("reward", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, (str, Mapping)):
            value = [value]
        if isinstance(value, list):
            value = [{"function": entry} if isinstance(entry, str) else entry for entry in value]
            if not value:
                raise ValueError("reward is an empty list; give at least one function, or leave reward out")
        return value


# --------------------------------------------------------------------------------------------- loading
def load_function(path: str) -> Callable[..., Any]:
    """The callable `path` names ("package.module:function" or "file.py:function"); a ValueError in one line
    naming the path and what is wrong."""
    if not isinstance(path, str) or path.count(":") != 1 or not all(part.strip() for part in path.split(":")):
        raise ValueError(f"reward function {path!r} must look like 'package.module:function' "
                         "(or 'path/to/file.py:function')")
    module_name, attribute = (part.strip() for part in path.split(":"))
    module = _import_file(module_name, path) if module_name.endswith(".py") else _import_module(module_name, path)
    target: Any = module
    for name in attribute.split("."):
        if not hasattr(target, name):
            where = getattr(module, "__file__", None) or module_name
            raise ValueError(f"reward function {path!r}: {module_name} ({where}) has no attribute {attribute!r}")
        target = getattr(target, name)
    if not callable(target):
        raise ValueError(f"reward function {path!r} is a {type(target).__name__}, not a function")
    return target


def _import_module(name: str, path: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)  # importable from the working directory, as with `python -m`
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            raise ValueError(f"reward function {path!r}: no module named {error.name!r} "
                             f"(looked in the working directory {cwd} and on sys.path)") from None
        raise ValueError(f"reward function {path!r}: importing {name} failed: {describe_error(error)}") from None
    except Exception as error:  # the user's module raised while importing
        raise ValueError(f"reward function {path!r}: importing {name} raised {describe_error(error)}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _import_file(name: str, path: str) -> Any:
    file = Path(name).expanduser().resolve()
    if not file.is_file():
        raise ValueError(f"reward function {path!r}: no file {file}")
    module_name = f"credo_reward_{file.stem}_{zlib.crc32(str(file).encode()):08x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"reward function {path!r}: {file} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise ValueError(f"reward function {path!r}: importing {file} raised {describe_error(error)}") from None
    return module


REQUIRED = {"trl": "completions", "verl": "solution_str"}
"""The keyword a function of each style must take (the others of its style are passed when it takes them)."""


def check_signature(function: Callable[..., Any], path: str, style: str) -> None:
    """A config error unless `function` takes its style's response keyword (`completions`, `solution_str`)."""
    try:
        inspect.signature(function).bind_partial(**{REQUIRED[style]: None})
    except (TypeError, ValueError) as error:
        if isinstance(error, ValueError):  # a builtin or an extension type without a signature: trust it
            return
        wanted = ("fn(prompts, completions, **columns)" if style == "trl"
                  else "compute_score(data_source, solution_str, ground_truth, extra_info=None)")
        raise ValueError(f"reward function {path!r} cannot be called as {wanted} ({style} style): {error}") from None


def callable_name(function: Callable[..., Any]) -> str:
    """The name TRL logs a reward function under (`rewards/<name>/mean`): its `__name__`, through
    `functools.partial`, or a callable instance's class name (TRL's `get_callable_name`)."""
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(function, "__name__", type(function).__name__)


def is_async(function: Callable[..., Any]) -> bool:
    """Whether calling `function` returns a coroutine: an `async def` function, through `functools.partial`, or a
    callable instance whose `__call__` is one (TRL's `is_async_callable`)."""
    while isinstance(function, functools.partial):
        function = function.func
    call = type(function).__call__ if not inspect.isroutine(function) else None
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def accepted_keywords(function: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments `function` takes; None: any (it has **kwargs, or no signature to read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


# --------------------------------------------------------------------------------------------- scoring
class Failure(Exception):
    """A reward function failed on a row: what went wrong, in words."""


class BatchShapeFailure(Failure):
    """A trl-style function returned a batch of the wrong shape (not a list, or not one value per row): no row can
    be blamed, since calling it again row by row would fit one value to each row by construction."""


@dataclass
class Loaded:
    """A loaded reward function of the config."""

    path: str
    function: Callable[..., Any]
    weight: float
    style: str
    keywords: set[str] | None
    """The keyword arguments it takes, and so is passed; None: any (it has `**kwargs`), so all of them."""

    @property
    def name(self) -> str:
        return callable_name(self.function)

    @property
    def is_async(self) -> bool:
        return is_async(self.function)

    def _call(self, **arguments: Any) -> Any:
        if self.keywords is not None:
            arguments = {name: value for name, value in arguments.items() if name in self.keywords}
        return self.function(**arguments)

    def scores(self, task: Any, problems: Sequence[Problem], texts: Sequence[str], ids: Sequence[list[int]] | None,
               hooks: Mapping[str, Any], batch: list[float | None | Failure] | Failure | None = None,
               ) -> list[float | None | Failure]:
        """Its value for each row: a number, None (no reward) or the `Failure` of that row. `ids`: the responses'
        token ids (TRL's `completion_ids`; None where the caller has none); `hooks`: TRL's other keywords
        (`trainer_state`, `log_extra`, `log_metric`); `batch`: the outcome of its call on the whole batch where it
        was already made (an async function's, awaited beside the others)."""
        if self.style == "verl":
            return [self._verl(task, problem, text) for problem, text in zip(problems, texts)]
        if batch is None:
            try:
                batch = self._trl(problems, texts, ids, hooks)
            except Failure as failure:
                batch = failure
        if not isinstance(batch, Failure):
            return batch
        if len(problems) == 1 or isinstance(batch, BatchShapeFailure):
            return [batch] * len(problems)
        out: list[float | None | Failure] = []
        for row, (problem, text) in enumerate(zip(problems, texts)):  # find the rows at fault
            try:
                out += self._trl([problem], [text], None if ids is None else [ids[row]], hooks)
            except Failure as failure:
                out.append(failure)
        return out

    def _trl(self, problems: Sequence[Problem], texts: Sequence[str], ids: Sequence[list[int]] | None,
             hooks: Mapping[str, Any]) -> list[float | None | Failure]:
        if self.is_async:
            return asyncio.run(self.awaited(problems, texts, ids, hooks))
        try:
            values = self._call(**trl_arguments(problems, texts, ids, hooks))
        except Exception as error:  # a user's function may raise anything
            raise Failure(f"raised {describe_error(error)}") from error
        return checked_values(values, len(problems))

    async def awaited(self, problems: Sequence[Problem], texts: Sequence[str], ids: Sequence[list[int]] | None,
                      hooks: Mapping[str, Any]) -> list[float | None | Failure]:
        """An async function's values on the batch (its `Failure` raised), awaited."""
        try:
            values = await self._call(**trl_arguments(problems, texts, ids, hooks))
        except Exception as error:  # a user's function may raise anything
            raise Failure(f"raised {describe_error(error)}") from error
        return checked_values(values, len(problems))

    def _verl(self, task: Any, problem: Problem, text: str) -> float | None | Failure:
        row = row_columns(problem)
        source = row["data_source"] if "data_source" in problem.meta else task.name
        extra = row["extra_info"] if "extra_info" in problem.meta else row
        try:
            value = self._call(data_source=source, solution_str=text, ground_truth=problem.answer, extra_info=extra)
        except Exception as error:  # a user's function may raise anything
            failure = Failure(f"raised {describe_error(error)}")
            failure.__cause__ = error
            return failure
        if isinstance(value, Mapping):
            if "score" not in value:
                return Failure(f"returned a dict without a 'score' key (keys: {', '.join(map(str, value))})")
            value = value["score"]
        try:
            return number(value)
        except Failure as failure:
            return failure


def trl_arguments(problems: Sequence[Problem], texts: Sequence[str], ids: Sequence[list[int]] | None,
                  hooks: Mapping[str, Any]) -> dict[str, Any]:
    """A batch's keyword arguments for a trl-style function, as TRL 1.16 passes them: the rows' columns, `prompts`
    and `completions` in TRL's shapes (message lists on a conversational batch, judged by its first row as TRL does;
    else strings), `completion_ids` (where known) and `hooks` (`trainer_state`, `log_extra`, `log_metric`)."""
    rows = [row_columns(problem) for problem in problems]
    names = dict.fromkeys(name for row in rows for name in row)
    columns = {name: [row.get(name) for row in rows] for name in names if name not in TRL_PARAMETERS}
    if isinstance(problems[0].prompt, ChatPrompt):
        prompts: list[Any] = [as_messages(p.prompt) for p in problems]
        completions: list[Any] = [[{"role": "assistant", "content": text}] for text in texts]
    else:
        prompts, completions = [p.prompt for p in problems], list(texts)
    known = {} if ids is None else {"completion_ids": [list(row) for row in ids]}
    return {**columns, **hooks, **known, "prompts": prompts, "completions": completions}


def as_messages(prompt: str) -> list[dict[str, str]]:
    """A prompt as a list of chat messages: a `ChatPrompt`'s own, a string as one user message."""
    if isinstance(prompt, ChatPrompt):
        return [dict(m) for m in prompt.messages]
    return [{"role": "user", "content": str(prompt)}]


def checked_values(values: Any, rows: int) -> list[float | None | Failure]:
    """A trl-style function's return value as one number, None or `Failure` per row; a `Failure` raised for a
    return value that is not a list of `rows` values."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise BatchShapeFailure(f"returned {_kind(values)}, not a list of {rows} numbers or None")
    if len(values) != rows:
        raise BatchShapeFailure(f"returned {len(values)} values for {rows} rows")
    out: list[float | None | Failure] = []
    for value in values:
        try:
            out.append(number(value))
        except Failure as failure:
            out.append(failure)
    return out


def row_columns(problem: Problem) -> dict[str, Any]:
    """A row's columns as reward functions see them: `answer`, `difficulty`, then the problem's `meta`."""
    return {"answer": problem.answer, "difficulty": problem.difficulty, **problem.meta}


def number(value: Any) -> float | None:
    """A reward value as a float, None for "no reward" (None or NaN); a `Failure` for anything else."""
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise Failure(f"returned {value}, not a finite number")
        return value
    raise Failure(f"returned {_kind(value)}, not a number or None")


class CustomReward:
    """The reward functions of a task's config, applied to batches of responses (see the module docstring)."""

    def __init__(self, functions: Sequence[RewardFunction], correct_at: float = 1.0) -> None:
        self.functions = []
        for spec in functions:
            function = RewardModel(spec.model) if spec.model is not None else load_function(spec.function)
            self.functions.append(Loaded(spec.name, function, spec.weight, spec.style, accepted_keywords(function)))
        self.correct_at = correct_at
        self._unscored_warned = False
        self.state = RewardState()
        """The trainer's progress, passed as `trainer_state` (set by `credo.train` before each step's sampling)."""
        self.metrics: dict[str, list[float]] = {}
        """Values the functions logged with `log_metric` since the last `drain`, by name."""
        self.columns: dict[str, list[Any]] = {}
        """Values the functions logged with `log_extra` since the last `drain`, by column."""

    def log_metric(self, name: str, value: float) -> None:
        """TRL's `log_metric`: a scalar for this batch, averaged into the step's record under `name`."""
        self.metrics.setdefault(name, []).append(float(value))

    def log_extra(self, column: str, values: list[Any]) -> None:
        """TRL's `log_extra`: one value per row of the batch, shown beside the step's logged samples."""
        self.columns.setdefault(column, []).extend(values)

    def drain(self) -> tuple[dict[str, float], dict[str, list[Any]]]:
        """The logged metrics (each its mean) and columns since the last call, which are then forgotten."""
        metrics = {name: sum(values) / len(values) for name, values in self.metrics.items() if values}
        columns, self.metrics, self.columns = self.columns, {}, {}
        return metrics, columns

    @classmethod
    def of(cls, config: Any) -> CustomReward | None:
        """The custom reward of a task config (a `RewardOptions`), or None when it has none."""
        functions = getattr(config, "reward", None)
        return cls(functions, getattr(config, "correct_at", 1.0)) if functions else None

    def check_shapes(self, task: Any, problem: Problem, completion_ids: list[int], on_error: str) -> None:
        """Each function called once, before any sampling, on a batch of two rows, `problem` (the first training row)
        twice with its answer as the response (`completion_ids` that answer's tokens): one that fails on the rows'
        shape (message lists on a conversational dataset, strings on a plain-text one), returns other than one value
        per row, or fails on anything else, is a one-line ValueError naming it and the shape it was given; a warning
        under `rollout.reward_errors=zero`. What it logs is dropped."""
        hooks = {"trainer_state": RewardState(max_steps=self.state.max_steps),
                 "log_extra": lambda column, values: None, "log_metric": lambda name, value: None}
        shape = ("a conversational row: prompts are message lists and each completion [{'role': 'assistant', "
                 "'content': text}]" if isinstance(problem.prompt, ChatPrompt)
                 else "a plain-text row: prompts and completions are strings")
        for loaded in self.functions:
            value = loaded.scores(task, [problem] * 2, [problem.answer] * 2, [completion_ids] * 2, hooks)[0]
            if not isinstance(value, Failure):
                continue
            message = (f"reward function {loaded.path} {value} when called on a batch of the first training row twice ({shape}) "
                       f"with its answer {short_repr(problem.answer, 40)} as the response")
            if on_error == "raise":
                raise ValueError(f"{message}; fix the function, or set rollout.reward_errors=zero to score the "
                                 "rows it fails on 0") from value.__cause__
            log.warning("%s; rows it fails on score 0 (rollout.reward_errors=zero)", message)

    def verdicts(self, task: Any, problems: Sequence[Problem], texts: Sequence[str], on_error: str,
                 completion_ids: Sequence[list[int]] | None = None) -> tuple[list[Verdict], int]:
        """The verdict on every response and how many rows a failing function scored 0 (`reward_errors`)."""
        n = len(problems)
        totals, scored, failed = [0.0] * n, [False] * n, [False] * n
        terms: list[list[tuple[str, float | None]]] = [[] for _ in range(n)]
        hooks = {"trainer_state": self.state, "log_extra": self.log_extra, "log_metric": self.log_metric}
        awaited = self._async_batches(problems, texts, completion_ids, hooks)
        for index, loaded in enumerate(self.functions):
            for row, value in enumerate(loaded.scores(task, problems, texts, completion_ids, hooks, awaited.get(index))):
                terms[row].append((loaded.name, value if not isinstance(value, Failure) else None))
                if isinstance(value, Failure):
                    if on_error == "raise":
                        raise RuntimeError(
                            f"reward function {loaded.path} {value} on prompt {short_repr(problems[row].prompt, 160)} "
                            f"(response {short_repr(texts[row], 80)}); set rollout.reward_errors=zero to score such "
                            "responses 0 instead"
                        ) from value.__cause__
                    if not failed[row]:
                        log.warning("reward function %s %s on prompt %s; reward 0", loaded.path, value,
                                    short_repr(problems[row].prompt, 160))
                    failed[row] = True
                elif value is not None:
                    totals[row] += loaded.weight * value
                    scored[row] = True
        own = own_verdicts(task, problems, texts, on_error) if task.checks_steps else None
        verdicts, unscored = [], 0
        for row in range(n):
            if failed[row]:
                verdict = Verdict(reward=0.0, correct=False)
            elif not scored[row]:
                unscored += 1
                verdict = Verdict(reward=0.0, correct=False, unscored=True)
            else:
                verdict = Verdict(reward=totals[row], correct=totals[row] >= self.correct_at)
            verdict = replace(verdict, terms=tuple(terms[row]))
            if own is not None:  # the task's step checker: where the first wrong step is
                verdict = replace(verdict, first_wrong_step=own[0][row].first_wrong_step,
                                  wrong_steps=own[0][row].wrong_steps, error_kind=own[0][row].error_kind,
                                  sandbox_failed=own[0][row].sandbox_failed)
            verdicts.append(verdict)
        if unscored:
            level = logging.DEBUG if self._unscored_warned else logging.WARNING
            self._unscored_warned = True
            log.log(level, "no reward function gave a value for %d of %d responses; their reward is 0 (Verdict.unscored; "
                    "further such messages are logged at debug level)", unscored, n)
        errors = sum(failed) + (own[1] if own is not None else 0)
        return verdicts, errors

    def _async_batches(self, problems: Sequence[Problem], texts: Sequence[str], ids: Sequence[list[int]] | None,
                       hooks: Mapping[str, Any]) -> dict[int, list | Failure]:
        """The batch outcome of each async trl-style function (by its index), all awaited concurrently, as TRL
        gathers them."""
        pending = [i for i, f in enumerate(self.functions) if f.style == "trl" and f.is_async]
        if not pending:
            return {}

        async def gathered() -> list[Any]:
            calls = (self.functions[i].awaited(problems, texts, ids, hooks) for i in pending)
            return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = asyncio.run(gathered())
        for outcome in outcomes:  # anything but a Failure is credo's own error: raise it
            if isinstance(outcome, BaseException) and not isinstance(outcome, Failure):
                raise outcome
        return dict(zip(pending, outcomes))

    def verdict(self, task: Any, problem: Problem, response: str) -> Verdict:
        """The verdict on one response (a failing function raises)."""
        return self.verdicts(task, [problem], [response], "raise")[0][0]


def own_verdicts(task: Any, problems: Sequence[Problem], texts: Sequence[str], on_error: str) -> tuple[list[Verdict], int]:
    """The task's own verdicts (`own_verify`), for its step checker."""
    from credo.tasks.base import verify_each

    return verify_each(task, task.own_verify, problems, texts, on_error)


def _kind(value: Any) -> str:
    return f"a {type(value).__name__} ({short_repr(value, 40)})"


class RewardedTask(Task):
    """The `verify` every task shares: its config's reward functions when it names some (`custom_reward`, a
    `CustomReward`), else the task's own scoring (`own_verify`). A task's step checker is part of its own
    scoring and keeps giving `first_wrong_step` under a custom reward (`CustomReward.verdict`)."""

    def verify(self, problem: Problem, response: str) -> Verdict:
        if self.custom_reward is not None:
            return self.custom_reward.verdict(self, problem, response)
        return self.own_verify(problem, response)
