"""The guessing game: a hidden number in a range, which the policy's guesses narrow down from feedback.

Its hidden state is what the turns must discover, and each guess's optimality is computable (a binary search's
worst case, `scorers/guess_env.py`): the per-turn checker of an environment whose turns are not steps of a
known solution. The turns are read behind the scorer sandbox. The registered task `guessing` plays it on one range
(`GuessingConfig`), with the minimax number of guesses as its turn limit by default, so that every guess that is
not a best one may cost the game.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import Field, model_validator

from credo.schema import Section
from credo.tasks.base import TASKS, Problem, Task, Verdict
from credo.tasks.environment import GoldAnswer, SandboxedEnvironment, rules_in_process

TURN_END = "</call>"
"""The marker that ends a guess."""


class GuessingEnvironment(SandboxedEnvironment):
    """Episodes of guesses at `problem.meta["secret"]` in `problem.meta["low"]..["high"]`."""

    def __init__(self, max_turns: int, turn_tokens: int = 24, step_seconds: float = 1.0) -> None:
        super().__init__("guess_env", TURN_END, max_turns, turn_tokens, step_seconds)

    def reset(self, problem: Problem) -> dict[str, Any]:
        return start_state(problem)

    def gold_answer(self, problem: Problem) -> GoldAnswer:
        """The guess of the secret, `<call>guess s</call>`."""
        return GoldAnswer("<call>guess ", str(problem.meta["secret"]))


def start_state(problem: Problem) -> dict[str, Any]:
    """An episode's state: the range the secret lies in (all of it, at the start) and the secret."""
    meta = problem.meta
    if not meta["low"] <= meta["secret"] <= meta["high"]:
        raise ValueError(f"guessing problem {problem.prompt!r}: its secret {meta['secret']} is outside "
                         f"{meta['low']}..{meta['high']}")
    return {"lo": meta["low"], "hi": meta["high"], "secret": meta["secret"]}


def prompt(low: int, high: int) -> str:
    """A game's prompt: the range it hides its secret in."""
    return f"guess {low}..{high}?"


def problems(seed: int, low: int, high: int) -> Iterator[Problem]:
    """An endless seeded stream of games: the secret uniform in `low..high`, the prompt naming the range."""
    rng = random.Random(seed)
    while True:
        secret = rng.randint(low, high)
        yield Problem(prompt(low, high), str(secret), meta={"low": low, "high": high, "secret": secret})


_RULES = rules_in_process("guess_env")


def minimax_guesses(low: int, high: int) -> int:
    """The fewest guesses that find any secret in `low..high` in the worst case (a binary search's)."""
    return _RULES.depth(high - low + 1)


class GuessingConfig(Section):
    """Options of the `guessing` task: the range the secret is drawn from, and the episode's limits."""

    name: str = "guessing"
    """The task's name in `task.name`: "guessing"."""
    low: int = Field(1, ge=0)
    """The smallest secret."""
    high: int = Field(100, ge=1, le=999_999)
    """The largest secret."""
    max_turns: int | None = Field(None, ge=1)
    """The most guesses of an episode; None: the minimax number (`minimax_guesses`).

    Under the minimax number a game is won within the limit by best guesses only, and each other guess may cost it."""
    turn_tokens: int = Field(16, ge=4)
    """The most tokens of one guess."""

    @model_validator(mode="after")
    def _ordered(self) -> GuessingConfig:
        if self.low >= self.high:
            raise ValueError(f"low = {self.low} must be below high = {self.high}")
        return self


@TASKS.register("guessing")
class GuessingTask(Task):
    """The guessing game as a task: each response is an episode of guesses that the game answers and scores (reward
    1 when a guess finds the secret within the turn limit), each guess judged by its optimality (`checks_steps`:
    an episode's non-best guesses are its wrong steps). Every prompt names the same range and hides its secret, so no
    problem can be learned by heart: the held-out problems are every secret of the range once."""

    name = "guessing"
    checks_steps = True
    multi_turn = True
    Config = GuessingConfig

    def __init__(self, config: GuessingConfig | None = None) -> None:
        self.config = config or GuessingConfig()
        cfg = self.config
        self.environment = GuessingEnvironment(cfg.max_turns or minimax_guesses(cfg.low, cfg.high), cfg.turn_tokens)

    def train_problems(self, seed: int, start: int = 0) -> Iterator[Problem]:
        for index, problem in enumerate(problems(seed, self.config.low, self.config.high)):
            if index >= start:
                yield problem

    def eval_problems(self) -> list[Problem]:
        low, high = self.config.low, self.config.high
        return [Problem(prompt(low, high), str(secret), meta={"low": low, "high": high, "secret": secret})
                for secret in range(low, high + 1)]

    def verify(self, problem: Problem, response: str) -> Verdict:
        raise ValueError("the guessing game's episodes are scored by its environment, turn by turn; a response "
                         "outside an episode has no verdict")

    def verify_batch(self, problems: Sequence[Problem], texts: Sequence[str],
                     on_error: str) -> tuple[list[Verdict], int]:
        return [self.verify(p, t) for p, t in zip(problems, texts, strict=True)], 0


def keyed_offsets(low: int, high: int, seed: int = 0) -> dict[int, int]:
    """The noisy player's misconceptions, one per range size `n` it can face (the decision types): an offset in
    -3..3 but 0 from the middle of the range, which it guesses instead of a best guess."""
    rng = random.Random(f"guess-keys-{seed}")
    return {n: rng.choice([-3, -2, -1, 1, 2, 3]) for n in range(1, high - low + 2)}


def noisy_guess(lo: int, hi: int, offsets: dict[int, int], p_misc: float, rng: random.Random) -> int:
    """The guess a noisy player makes in `lo..hi`: with probability `p_misc` the middle moved by its misconception
    for this range size (kept in the range; it may still happen to be a best guess), else the middle."""
    middle = (lo + hi) // 2
    if rng.random() < p_misc:
        return min(hi, max(lo, middle + offsets[hi - lo + 1]))
    return middle


def noisy_transcript(problem: Problem, offsets: dict[int, int], p_misc: float, rng: random.Random, *,
                     max_turns: int) -> tuple[list[str], list[str]]:
    """An SFT transcript of a game: the noisy player's guesses (`noisy_guess`) until it finds the secret or runs out
    of turns, and the game's observation after each ("" after the last, when it found the secret)."""
    state, turns, observations = start_state(problem), [], []
    while len(turns) < max_turns:
        turn = f"<call>guess {noisy_guess(state['lo'], state['hi'], offsets, p_misc, rng)}</call>"
        reply = _RULES.step(state, turn)
        state = reply["state"]
        turns.append(turn)
        observations.append(reply["observation"])
        if reply["done"]:
            break
    return turns, observations
