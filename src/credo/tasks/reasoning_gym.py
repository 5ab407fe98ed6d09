"""reasoning-gym tasks: `task.name: "reasoning_gym:<dataset>"`, any of its procedural datasets, graded by its scorers.

The training problems are `size` items of the dataset generated with `seed` (on first use); the held-out
problems are the first `eval_size` items generated with a derived seed (`(seed + 2**31) % 2**32`) whose
question is neither in the training set nor a repeat (up to `EVAL_CHUNKS` batches are drawn to make up for
those removed), so the model never trains on an eval question. `config` is passed to
`reasoning_gym.create_dataset(dataset, size=..., seed=..., **config)`: the dataset's own options. Validating
the config builds the dataset object and one problem, not the whole set.

A response's answer is the content of its last `<answer>...</answer>` (as reasoning-gym's own extractor reads
it, in linear time: `last_answer_tag`), else of its last `\\boxed{...}` (else, with `answer_fallback:
last_number`, its last number); the dataset's `score_answer(answer, entry)` scores it (clamped to [0, 1]; a
scorer that raises scores 0). The reward is that score (partial credit where the dataset gives it), or with
`binary_reward` 1/0; a response is `correct` when its score reaches `correct_threshold`. No answer: 0.

The answer is untrusted (some scorers `eval` it): where the dataset's scorer evaluates answers, one outside
the dataset's answer grammar (`credo.tasks.answer_grammar`) scores 0 without reaching the scorer, and every
scorer runs in a sandbox worker (`credo.tasks.sandbox`) with a time limit of `score_timeout_s` per answer; a
scoring that overruns it, dies or hits a limit scores 0 with `Verdict.sandbox_failed` set. The grammar is the
one of the dataset that scores the answer (a `composite` entry's source dataset), and a config naming a dataset
(or a composite's entry) whose scorer evaluates answers without a grammar is refused at validation.
`verify_batch` scores a batch within `verify_budget_s`: each answer's limit is the smaller of `score_timeout_s`
and its share of the budget (what is left, divided by the answers still to score), so answers that overrun cannot
spend the time of the answers after them; an answer left without time scores 0 without reaching the scorer,
with `Verdict.sandbox_failed` set (so counted in `verify/sandbox_failures`) and counted in `over_budget`.

`bucket_by` names keys of the entries' `metadata["difficulty"]` for the eval's difficulty buckets, e.g.
`["num_terms"]` gives "num_terms=3"; a key the entry's metadata also holds on its own is that problem's value
(chain_sum's "num_terms" is 3 for a 3-term sum, while `metadata["difficulty"]["num_terms"]` is the dataset's
range), else the difficulty mapping's value.

reasoning-gym is an optional package (`pip install 'credo[tasks]'`), imported only when such a task is used.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Literal

from pydantic import Field, model_validator

from credo.extras import require
from credo.tasks.answer_grammar import COMPOSITE, admits, guarded
from credo.tasks.base import TASKS, Problem, Verdict, describe_error, fair_shares, seeded_epochs, verify_each
from credo.tasks.jsonl import _NUMBER, last_boxed
from credo.tasks.rewards import CustomReward, RewardedTask, RewardOptions
from credo.tasks.sandbox import Sandbox

log = logging.getLogger(__name__)

FAMILY = "reasoning_gym"

DEFAULT_INSTRUCTION = (
    "Think step by step, then give the final answer in this format: <answer>answer here</answer>. "
    "Do not explain your reasoning inside the answer tags, give only the final answer."
)
"""Appended to every question (after a blank line); in the spirit of reasoning-gym's default system prompt."""

EVAL_SEED_OFFSET = 2**31
"""The eval set's seed is `(seed + EVAL_SEED_OFFSET) % 2**32`: reasoning-gym seeds item i with seed + i, so
a nearby seed would repeat the training items."""

EVAL_CHUNKS = 10
"""How many eval-sized batches the held-out set may draw to replace questions removed as training repeats."""

SANDBOX = Sandbox("reasoning-gym", "reasoning_gym_scorer")
"""Where the datasets' scorers run (one worker per process, shared by every reasoning-gym task)."""


def _reasoning_gym() -> ModuleType:
    return require("reasoning_gym", "tasks", f"reasoning-gym tasks (task.name: {FAMILY}:<dataset>)")


def check_dataset(dataset: str) -> tuple[type, set[str]]:
    """The dataset's config class and its option names; an unknown name is an error suggesting close ones."""
    registry = _reasoning_gym().factory.DATASETS
    if dataset not in registry:
        close = difflib.get_close_matches(dataset, list(registry), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "no close match"
        raise ValueError(f"unknown reasoning-gym dataset {dataset!r}; {hint} ({len(registry)} datasets: see "
                         "reasoning_gym.factory.DATASETS)")
    config_class = registry[dataset][1]
    return config_class, {f.name for f in dataclasses.fields(config_class)} - {"size", "seed"}


def create_dataset(dataset: str, options: dict[str, Any], size: int, seed: int) -> Any:
    """`reasoning_gym.create_dataset(dataset, size=size, seed=seed, **options)`, with errors that name the
    dataset and the offending key."""
    name = f"{FAMILY}:{dataset}"
    _, allowed = check_dataset(dataset)
    for key in options:
        if key in ("size", "seed"):
            raise ValueError(f"{name}: set task.{key}, not config.{key}")
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            listed = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"{name}: unknown config key {key!r}{hint}; allowed: {listed}")
    try:
        return _reasoning_gym().create_dataset(dataset, size=size, seed=seed, **options)
    except Exception as error:  # the dataset's own validation: AssertionError, ValueError, TypeError, ...
        raise ValueError(f"{name}: invalid config {options}: {describe_error(error)}") from None


class ReasoningGymConfig(RewardOptions):
    name: str
    """"reasoning_gym:<dataset>", e.g. "reasoning_gym:chain_sum"."""
    size: int = Field(1000, ge=1)
    """Training problems (one epoch of the training stream)."""
    eval_size: int = Field(100, ge=1)
    """Held-out problems (fewer if the dataset has too few questions outside the training set)."""
    seed: int = Field(0, ge=0, lt=2**32)
    """The dataset's seed (the eval set's is derived from it)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The dataset's own options, passed to `reasoning_gym.create_dataset`."""
    correct_threshold: float = Field(1.0, gt=0.0, le=1.0)
    """A response is correct when its score is at least this."""
    binary_reward: bool = False
    """Reward 1 for a correct response and 0 otherwise, instead of the scorer's score."""
    instruction: str | None = DEFAULT_INSTRUCTION
    """Appended to every question after a blank line (None or "": the question alone)."""
    answer_fallback: Literal["none", "last_number"] = "none"
    """A response without an `<answer>` tag or `\\boxed{}`: "none" has no answer, "last_number" its last number.

    "none" is reasoning-gym's rule; "last_number" suits small models that do not follow the answer format, e.g.
    SmolLM2-135M."""
    bucket_by: list[str] = Field(default_factory=list)
    """Keys of the entries' `metadata["difficulty"]` forming the eval buckets ("num_terms=3"); empty: "all"."""
    score_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    """Time (wall clock, and CPU) the sandboxed scorer may take per answer; beyond it the answer scores 0."""
    verify_budget_s: float = Field(60.0, gt=0.0)
    """Time (wall clock) scoring one batch may take in all; once spent, the batch's other answers score 0.

    Each answer's limit is the smaller of `score_timeout_s` and its share of what is left (`verify_batch`); a batch of
    well-formed answers takes well under a second, one of answers that each overrun `score_timeout_s` would
    otherwise take the batch's size times it."""

    @property
    def dataset(self) -> str:
        return self.name.partition(":")[2].strip()

    @model_validator(mode="after")
    def _check(self) -> ReasoningGymConfig:
        family, _, dataset = self.name.partition(":")
        if family != FAMILY or not dataset.strip():
            raise ValueError(f"name must be {FAMILY}:<dataset>, got {self.name!r}")
        # builds the dataset object (no items) and one item: catches bad options and bucket keys before any
        # model is loaded, without generating the whole set
        probe = create_dataset(self.dataset, self.config, size=1, seed=self.seed)
        try:
            entry = probe[0]
        except Exception as error:
            raise ValueError(f"{self.name}: generating a problem with config {self.config} failed: "
                             f"{describe_error(error)}") from None
        bucket(entry, self.bucket_by, self.name)
        for dataset, scorer in scorers(self.dataset, probe).items():
            if not guarded(dataset, scorer):
                raise ValueError(f"{self.name}: the scorer of reasoning-gym dataset {dataset!r} evaluates answers "
                                 f"(eval, exec or sympy in {scorer.__module__}) and credo has no answer grammar for "
                                 "it; add one to credo.tasks.answer_grammar.GRAMMARS, or use another dataset")
        return self


def scorers(dataset: str, built: Any) -> dict[str, type]:
    """The datasets whose scorers see answers to `built` (the dataset `dataset`), with their classes: the dataset
    itself, or a composite's parts (nested composites included)."""
    if dataset != COMPOSITE:
        return {dataset: type(built)}
    found: dict[str, type] = {}
    for name, part in built.datasets.items():
        found.update(scorers(name, part))
    return found


def bucket(entry: dict[str, Any], keys: list[str], name: str) -> str:
    """The difficulty bucket of a reasoning-gym entry: "k1=v1,k2=v2" for `keys`, or "all" without keys."""
    if not keys:
        return "all"
    metadata = entry.get("metadata") or {}
    difficulty = metadata.get("difficulty")
    if not isinstance(difficulty, dict):
        raise ValueError(f"{name}: the dataset's entries have no metadata['difficulty'] to bucket by; drop bucket_by")
    parts = []
    for key in keys:
        if key not in difficulty:
            raise ValueError(f"{name}: bucket_by key {key!r} is not in the entries' metadata['difficulty']; "
                             f"available: {', '.join(difficulty) or 'none'}")
        value = metadata[key] if key != "difficulty" and key in metadata else difficulty[key]
        parts.append(f"{key}={value}")
    return ",".join(parts)


OPEN, CLOSE = "<answer>", "</answer>"


def last_answer_tag(response: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>`, read as reasoning-gym's `extract_answer` reads it
    (tag pairs left to right, each closed by the first `</answer>` after it), in one pass: linear time (its
    regex takes quadratic time on many unclosed `<answer>`)."""
    found, position = None, 0
    while (start := response.find(OPEN, position)) >= 0:
        end = response.find(CLOSE, start + len(OPEN))
        if end < 0:
            break
        found, position = (start + len(OPEN), end), end + len(CLOSE)
    return None if found is None else response[found[0]:found[1]].strip()


def extract_answer(response: str, fallback: str = "none") -> str | None:
    """The last `<answer>...</answer>` content (`last_answer_tag`), else the last `\\boxed{...}`, else (with
    `fallback="last_number"`) the last number. Linear time."""
    answer = last_answer_tag(response)
    if answer is None:
        boxed = last_boxed(response)
        answer = boxed.strip() if boxed is not None else None
    if answer is None and fallback == "last_number":
        answer = last_number(response)
    return answer


def last_number(response: str) -> str | None:
    """The response's last number, without thousands separators (one pass, keeping only the last match)."""
    match = None
    for match in _NUMBER.finditer(response):
        pass
    return None if match is None else match.group().replace(",", "")


@TASKS.register(FAMILY)
class ReasoningGymTask(RewardedTask):
    checks_steps = False
    variant = "dataset"
    """Configs name it "reasoning_gym:<dataset>"."""
    Config = ReasoningGymConfig

    def __init__(self, config: ReasoningGymConfig) -> None:
        self.config = config
        self.name = config.name
        self.dataset = create_dataset(config.dataset, config.config, size=config.size, seed=config.seed)
        self._train: list[Problem] | None = None
        self._held_out: list[Problem] | None = None
        self._scorer_errors = 0
        self.over_budget = 0
        """Answers scored 0 without scoring because their batch's `verify_budget_s` was spent (so far)."""
        self.custom_reward = CustomReward.of(config)

    def _problem(self, entry: dict[str, Any]) -> Problem:
        question = str(entry["question"])
        prompt = f"{question}\n\n{self.config.instruction}" if self.config.instruction else question
        answer = "" if entry.get("answer") is None else str(entry["answer"])
        difficulty = bucket(entry, self.config.bucket_by, self.name)
        return Problem(prompt, answer, difficulty, {"entry": entry, "question": question})

    @property
    def train(self) -> list[Problem]:
        """The training set (generated on first use)."""
        if self._train is None:
            self._train = [self._problem(self.dataset[i]) for i in range(len(self.dataset))]
        return self._train

    def train_problems(self, seed: int, start: int = 0) -> Iterator[Problem]:
        """Epochs over the training problems, each in a fresh seeded order."""
        return seeded_epochs(self.train, seed, start)

    def eval_problems(self) -> list[Problem]:
        """`eval_size` problems from the derived seed whose questions are not in the training set (nor repeats)."""
        if self._held_out is None:
            self._held_out = self._draw_held_out()
        return list(self._held_out)

    def _draw_held_out(self) -> list[Problem]:
        config = self.config
        seen = {p.meta["question"] for p in self.train}
        held_out: list[Problem] = []
        base = (config.seed + EVAL_SEED_OFFSET) % 2**32
        for chunk in range(EVAL_CHUNKS):
            seed = base + chunk * config.eval_size
            dataset = create_dataset(config.dataset, config.config, size=config.eval_size, seed=seed)
            for i in range(len(dataset)):
                problem = self._problem(dataset[i])
                if problem.meta["question"] not in seen:
                    seen.add(problem.meta["question"])
                    held_out.append(problem)
                    if len(held_out) == config.eval_size:
                        return held_out
        if not held_out:
            raise ValueError(f"{self.name}: every eval question also appears in the training set (size={config.size}); "
                             "the dataset has too few distinct questions: lower size or widen its config")
        log.warning("%s: only %d held-out problems outside the training set (eval_size %d)",
                    self.name, len(held_out), config.eval_size)
        return held_out

    def verify_batch(self, problems: Sequence[Problem], texts: Sequence[str],
                     on_error: str) -> tuple[list[Verdict], int]:
        """The verdicts on a batch and how many verifications failed (`verify_all` calls it when no reward
        functions are named), the sandboxed scoring taking `verify_budget_s` in all (extracting answers and checking
        grammars, linear in the responses' lengths, and stopping an overrunning worker come on top).

        Each answer's share of the budget is what is left of it divided by the answers still to score
        (`base.fair_shares`)."""
        before, share_s = self.over_budget, fair_shares(self.config.verify_budget_s, len(texts))
        verdicts, errors = verify_each(self, lambda problem, text: self.own_verify(problem, text, share_s()),
                                       problems, texts, on_error)
        if self.over_budget > before:
            log.warning("%s: scoring a batch spent its verify_budget_s (%g s); %d of its %d answers scored 0 "
                        "without scoring (counted in verify/sandbox_failures)", self.name,
                        self.config.verify_budget_s, self.over_budget - before, len(texts))
        return verdicts, errors

    def own_verify(self, problem: Problem, response: str, share_s: float | None = None) -> Verdict:
        """The dataset's scorer on the response's answer, in the sandbox, for at most `score_timeout_s` and the
        answer's share of its batch's budget, `share_s` (none left: the answer scores 0 without scoring,
        `over_budget`)."""
        entry = problem.meta.get("entry")
        if entry is None:
            raise ValueError(f"{self.name}: the problem carries no reasoning-gym entry (meta['entry']); "
                             "it is not from this task")
        answer = extract_answer(response, self.config.answer_fallback)
        if answer is None or not admits(self.config.dataset, answer, entry):
            return Verdict(reward=0.0, correct=False)
        config = self.config
        timeout_s = config.score_timeout_s if share_s is None else min(config.score_timeout_s, share_s)
        if timeout_s <= 0:
            self.over_budget += 1
            return Verdict(reward=0.0, correct=False, sandbox_failed=True)
        outcome = SANDBOX.call("score", (config.dataset, config.config, config.size, config.seed, answer, entry),
                               timeout_s)
        if outcome.failed:
            return Verdict(reward=0.0, correct=False, sandbox_failed=True)
        if outcome.error is not None:  # some scorers raise on malformed answers (e.g. int("abc")): a wrong answer
            self._scorer_errors += 1
            level = logging.WARNING if self._scorer_errors == 1 else logging.DEBUG
            log.log(level, "%s: the scorer raised %s on answer %r; scored 0 "
                    "(further such errors are logged at debug level)", self.name, outcome.error, answer[:200])
        score = outcome.value if isinstance(outcome.value, (int, float)) else 0.0
        score = min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0
        correct = score >= self.config.correct_threshold
        return Verdict(reward=float(correct) if self.config.binary_reward else score, correct=correct)
