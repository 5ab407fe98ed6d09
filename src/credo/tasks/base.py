"""The task protocol: prompts with ground truth, a verifier, and (where the task can) a step checker.

A task hands the trainer `Problem`s (a user message, its answer, a difficulty bucket) and judges a
response with `verify`, which returns a `Verdict`: a reward in [0, 1], a boolean `correct`, and, for
tasks that check steps, the index of the first wrong thought (0-based; thoughts are separated by the
`</thought>` delimiter). Tasks are registered by name in `TASKS`.

A registered class may stand for a family of tasks: one that sets `variant` (e.g. "dataset") is named
"family:<variant>" in configs (`reasoning_gym:chain_sum`). `task_class(name)` resolves either form; look task
classes up through it, never with `TASKS.get` directly.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from credo.registry import Registry
from credo.tasks.sandbox import SandboxUnavailable

if TYPE_CHECKING:
    from credo.tasks.environment import Environment
    from credo.tasks.rewards import CustomReward

log = logging.getLogger(__name__)

THOUGHT_END = "</thought>"
"""Delimiter that closes a thought (one reasoning step) in step-checked tasks."""

THOUGHT_INSTRUCTION = (
    "Solve the problem step by step. Write each step as one self-contained thought and end every thought "
    f"with {THOUGHT_END}. Put the final answer in \\boxed{{}}."
)
"""The rollout instruction of the thought MDP (RRPO/SRPO) for chat models (`task.instruction`)."""


@dataclass(frozen=True)
class Problem:
    prompt: str
    """The user message (the model's chat template is applied by the trainer), or a `ChatPrompt`: a string
    (its last user message) that carries the whole conversation in `.messages` (system turn and all)."""
    answer: str
    """Ground-truth final answer."""
    difficulty: str = "all"
    """Bucket for per-difficulty evaluation, e.g. "steps=4"."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Task-specific data (e.g. the arithmetic chain) that `verify` may use."""


@dataclass(frozen=True)
class Verdict:
    reward: float
    """In [0, 1] from a task's own scoring; a custom `task.reward` may give any finite value."""
    correct: bool
    first_wrong_step: int | None = None
    """0-based index of the first wrong thought; None when every step is right or the task cannot tell."""
    wrong_steps: tuple[int, ...] | None = None
    """0-based indices of every wrong thought, in order (a malformed thought: it and every later one); empty when
    every step is right; None when the task cannot tell (per-decision oracle credit)."""
    error_kind: str | None = None
    """What the first wrong step was (e.g. a misconception's name, "slip", "format"); None if no wrong step."""
    sandbox_failed: bool = False
    """The verification failed in its sandbox (the scorer's worker overran its time limit, died, hit a limit
    or attempted a refused operation): scored 0, and counted in `verify/sandbox_failures`."""
    unscored: bool = False
    """No custom reward function gave this response a value (each returned None): reward 0 (`unscored_count`)."""
    terms: tuple[tuple[str, float | None], ...] = ()
    """Under a custom `task.reward`: each function's name and its value for this response (None where it gave
    none or failed), in the config's order; the step logs their means as `rewards/<name>/mean` (TRL's names)."""


class Task(Protocol):
    """What the training loop, its samplers and the evaluation read from a task, and nothing else.

    A task class subclasses `Task` (as `RewardedTask` does) to take the defaults of `custom_reward`, `environment`
    and `verify_batch`."""

    name: str
    checks_steps: bool
    """Whether `verify` fills `first_wrong_step` and `wrong_steps` (needed by the oracles, oracle localisers and
    credit diagnostics)."""
    custom_reward: CustomReward | None = None
    """The config's reward functions (`task.reward`, `credo.tasks.rewards.CustomReward`), which score responses in
    place of the task's own scoring (`verify_all`); None: the task scores them itself. The loop checks their shapes
    before sampling (`check_reward_shapes`), sets their `trainer_state` before each step's sampling and logs what
    they recorded after it (`custom_reward.drain()`)."""
    environment: Environment | None = None
    """The task's multi-turn side (`credo.tasks.environment`): None for a single-turn task, whose responses are
    sampled whole and verified; else each response is an episode of turns that the environment answers and scores
    (`credo.rollout.episodes`)."""
    multi_turn: bool = False
    """The class's tasks have an environment (known before one is built: a config's validation asks the samplers
    whether they draw episodes)."""

    def train_problems(self, seed: int, start: int = 0) -> Iterator[Problem]:
        """An endless, seeded stream of training problems, resumable at position `start`."""
        ...

    def eval_problems(self) -> list[Problem]:
        """The held-out problems (never in the training stream), with their difficulty buckets."""
        ...

    def verify(self, problem: Problem, response: str) -> Verdict:
        ...

    def verify_batch(self, problems: Sequence[Problem], texts: Sequence[str],
                     on_error: str) -> tuple[list[Verdict], int]:
        """The verdicts on a batch of responses and how many were scored 0 because verifying them failed
        (`verify_all`, without a custom reward). By default, `verify` on each in turn (`verify_each`); a task that
        scores within a batch's budget (reasoning-gym's `verify_budget_s`) overrides it."""
        return verify_each(self, self.verify, problems, texts, on_error)


TASKS: Registry[type] = Registry("task")


def verify_all(task: Task, problems: list[Problem], texts: list[str], on_error: str,
               completion_ids: list[list[int]] | None = None) -> tuple[list[Verdict], int]:
    """The task's verdict on every response, and how many were scored 0 because verifying them failed.

    A verifier that raises stops the step (`on_error="raise"`) or scores 0 (`"zero"`). A task whose config
    names reward functions (`task.custom_reward`, `credo.tasks.rewards`) is scored by them, a batch at a time (with
    the responses' token ids, `completion_ids`, where the caller has them); any other by its `verify_batch`."""
    if task.custom_reward is not None:
        return task.custom_reward.verdicts(task, problems, texts, on_error, completion_ids)
    return task.verify_batch(problems, texts, on_error)


def fair_shares(budget_s: float, answers: int) -> Callable[[], float]:
    """A batch's verification budget shared fairly: each call (one per answer, in order) gives that answer's share,
    what is left of `budget_s` divided by the answers still to score. An answer may use what earlier ones left
    unused, never what later ones are owed, so answers that overrun cannot score the ones after them 0."""
    started, scored = time.monotonic(), itertools.count()

    def share_s() -> float:
        return (budget_s - (time.monotonic() - started)) / max(1, answers - next(scored))

    return share_s


def verify_each(task: Task, verify, problems: list[Problem], texts: list[str],
                on_error: str) -> tuple[list[Verdict], int]:
    """`verify(problem, text)` on every response; one that raises stops the step or scores 0 (`on_error`). A
    sandbox that cannot start its boundary (`SandboxUnavailable`) always stops it: no answer could be scored."""
    verdicts, errors = [], 0
    for problem, text in zip(problems, texts):
        try:
            verdicts.append(verify(problem, text))
        except SandboxUnavailable:
            raise
        except Exception as error:  # a user's verifier may raise anything
            if on_error == "raise":
                raise RuntimeError(
                    f"the {task.name} verifier raised {type(error).__name__}: {error}\n"
                    f"  prompt:   {problem.prompt!r}\n  response: {text!r}\n"
                    "(set rollout.reward_errors=zero to score such responses 0 instead)"
                ) from error
            log.warning("verifier raised %s on prompt %r; reward 0", type(error).__name__, problem.prompt)
            verdicts.append(Verdict(reward=0.0, correct=False))
            errors += 1
    return verdicts, errors


def sandbox_failures(verdicts: list[Verdict]) -> int:
    """How many verifications failed in their sandbox (logged as `verify/sandbox_failures`)."""
    return sum(v.sandbox_failed for v in verdicts)


def unscored_count(verdicts: list[Verdict]) -> int:
    """How many responses no custom reward function gave a value (each returned None; reward 0)."""
    return sum(v.unscored for v in verdicts)


def task_names() -> list[str]:
    """The names a config may give: plain tasks as registered, families as "family:<variant>"."""
    names = []
    for name in TASKS:
        variant = getattr(TASKS.get(name), "variant", None)
        names.append(f"{name}:<{variant}>" if variant else name)
    return names


def task_class(name: str) -> type:
    """The task class a config's `task.name` selects: "arith", or "reasoning_gym:chain_sum" for the
    "reasoning_gym" family (a registered class with a `variant`, which its config reads from the name)."""
    if not isinstance(name, str):
        raise ValueError(f"task name must be a string, got {name!r}")
    family, colon, rest = name.partition(":")
    if family not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid names: {', '.join(task_names())}")
    cls = TASKS.get(family)
    variant = getattr(cls, "variant", None)
    if variant and not rest.strip():
        raise ValueError(f"task {name!r} needs a {variant}: {family}:<{variant}>")
    if colon and not variant:
        raise ValueError(f"task {family!r} takes no ':' suffix (got {name!r})")
    return cls


def seeded_epochs(problems: Sequence[Problem], seed: int, start: int = 0) -> Iterator[Problem]:
    """An endless stream of epochs over `problems`, each in a fresh order drawn from `seed`, from position `start`
    (a resumed run continues the same stream)."""
    rng = random.Random(seed)
    index = 0
    while True:
        order = list(range(len(problems)))
        rng.shuffle(order)
        for i in order:
            if index >= start:
                yield problems[i]
            index += 1


def describe_error(error: BaseException) -> str:
    """An exception in one line for an error message: its type, then its text with whitespace collapsed, cut at 200
    characters (its type alone where it has no text)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters for an error message (a string subclass shown as a plain string)."""
    text = repr(str(value) if isinstance(value, str) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
