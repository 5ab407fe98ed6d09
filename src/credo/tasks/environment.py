"""Multi-turn episodes: the environment a task may provide, whose observations answer the policy's turns.

An episode alternates the policy's turns and the environment's observations in one sequence: the policy writes a
turn (a tool call, a guess, a final answer), ending at the environment's `turn_end` marker or at the end token;
the environment reads it and answers with an observation (the tool's result, feedback), which the trainer appends
as context the policy never trains on. The episode ends when the environment says so (a final answer), at
`max_turns`, or when its token budget runs out.

A turn is model output, so the environment's reading of it runs behind the scorer sandbox
(`credo.tasks.sandbox`): an environment names a scorer module (`credo/tasks/scorers/`) whose `step(state, turn)`
function returns the turn's outcome as plain JSON, and `SandboxedEnvironment.step_batch` calls it for a batch of
episodes, one sandboxed child per turn. The state it passes is the environment's own (JSON, made by `reset` from the
problem on the trainer's side); the turn is the only model output that reaches it, as a string.

Each outcome carries what turn-level credit reads (docs/methods.md, "Turns"): the turn's reward where the
environment gives one (`turn_reward`), the per-turn checker's verdict (`correct`: the agent testbed's yardstick of
perfect turn credit, None for a turn that decides nothing, such as a check), and on the last turn the episode's
reward. A sandboxed step that fails (overruns, dies, hits a limit) ends its episode with reward 0 and is counted.
An environment may also say how a turn that gives the gold answer reads (`gold_answer`): IGPO's information gain
scores the policy's probability of that answer after each turn (`credo.rollout.samplers.info_gain`).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from credo.tasks.base import Problem
from credo.tasks.sandbox import SCORERS, Sandbox


@dataclass(frozen=True)
class TurnOutcome:
    """What the environment answers to one turn of the policy."""

    observation: str
    """Text appended after the turn as context (never trained on); "" on the last turn."""
    done: bool
    """The episode ended with this turn (a final answer, or a turn the environment ends the episode on)."""
    state: Mapping[str, Any]
    """The episode's state after the turn (the environment's own JSON), passed to its next `step`."""
    kind: str = "turn"
    """What the turn was, in the environment's words (e.g. "call", "check", "answer", "invalid")."""
    correct: bool | None = None
    """The per-turn checker's verdict on the turn's decision; None where the turn decides nothing."""
    turn_reward: float | None = None
    """A reward for this turn where the environment gives one (MT-GRPO's turn rewards); None: none."""
    reward: float | None = None
    """The episode's reward, on its last turn (None before it)."""
    failed: bool = False
    """The sandboxed step failed (overran its bound, died, hit a limit): the episode ends with reward 0."""


@dataclass(frozen=True)
class GoldAnswer:
    """A turn that gives a problem's gold answer, as the policy would write it: `lead` then `answer` (the tokens whose
    probability IGPO's information gain reads)."""

    lead: str
    """The turn's text before the answer (e.g. `\\boxed{`), given to the policy, not scored."""
    answer: str
    """The gold answer's text, scored."""


class Environment(Protocol):
    """The multi-turn side of a task: episodes from problems, and outcomes from the policy's turns."""

    turn_end: str
    """The marker that ends a policy's turn (kept in the turn): generation of a turn stops after it."""
    max_turns: int
    """The most policy turns an episode may take; an episode that reaches it ends with reward 0."""
    turn_tokens: int
    """The most tokens of one policy turn (a turn cut there is read as it stands)."""

    def reset(self, problem: Problem) -> dict[str, Any]:
        """A new episode's state (JSON) from the problem, made on the trainer's side from trusted data."""
        ...

    def anchor(self, state: Mapping[str, Any]) -> str:
        """The key of a state as the policy meets it (GiGPO's anchor state): turns taken from states with one key,
        in one group, face the same situation (a key leaves out the history that led there)."""
        ...

    def step_batch(self, states: Sequence[Mapping[str, Any]], turns: Sequence[str]) -> list[TurnOutcome]:
        """Each episode's outcome of its next turn (`turns[i]` is the policy's text for `states[i]`)."""
        ...

    def gold_answer(self, problem: Problem) -> GoldAnswer | None:
        """The turn that answers `problem` with its gold answer, or None where the environment has none to give."""
        ...


@dataclass
class SandboxedEnvironment:
    """An `Environment` whose turns are read by a scorer module's `step(state, turn) -> dict` in the sandbox.

    The scorer's reply holds `TurnOutcome`'s fields by name (`observation`, `done`, `state`, and optionally `kind`,
    `correct`, `turn_reward`, `reward`); a reply without them, a raised error or a failed call ends the episode
    with reward 0 (`failed`). Subclasses give `reset`, and the scorer module, turn marker and turn limit."""

    scorer: str
    """The scorer module's name in `credo/tasks/scorers/` (its `step` reads a turn)."""
    turn_end: str
    max_turns: int
    turn_tokens: int
    step_seconds: float = 1.0
    """The bound of one turn's step in its sandboxed child."""
    failures: int = 0
    """Sandboxed steps that failed so far (overran, died, raised or replied without an outcome)."""
    sandbox: Sandbox = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sandbox = Sandbox(self.scorer, self.scorer)

    def anchor(self, state: Mapping[str, Any]) -> str:
        """The whole state as its key (JSON, keys sorted); an environment whose state holds history overrides it."""
        return json.dumps(state, sort_keys=True)

    def gold_answer(self, problem: Problem) -> GoldAnswer | None:
        """None: a subclass whose answer turns have a fixed form says how they read."""
        return None

    def step_batch(self, states: Sequence[Mapping[str, Any]], turns: Sequence[str]) -> list[TurnOutcome]:
        outcomes = self.sandbox.call_many("step", [(dict(s), str(t)) for s, t in zip(states, turns, strict=True)],
                                          self.step_seconds)
        results = []
        for state, outcome in zip(states, outcomes, strict=True):
            result = None if outcome.failed or outcome.error is not None else _turn_outcome(outcome.value)
            if result is None:
                self.failures += 1
                result = TurnOutcome("", True, state, kind="failed", reward=0.0, failed=True)
            results.append(result)
        return results


def _turn_outcome(value: Any) -> TurnOutcome | None:
    """A scorer's reply as a `TurnOutcome`, or None where it is not one (the fields' types are checked: the reply
    came from a child that read model output)."""
    if not isinstance(value, dict) or not isinstance(value.get("state"), dict):
        return None
    observation, done, kind = value.get("observation"), value.get("done"), value.get("kind", "turn")
    correct, turn_reward, reward = value.get("correct"), value.get("turn_reward"), value.get("reward")
    if not (isinstance(observation, str) and isinstance(done, bool) and isinstance(kind, str)
            and (correct is None or isinstance(correct, bool))
            and all(r is None or (isinstance(r, (int, float)) and not isinstance(r, bool))
                    for r in (turn_reward, reward))):
        return None
    return TurnOutcome(observation, done, value["state"], kind, correct,
                       None if turn_reward is None else float(turn_reward), None if reward is None else float(reward))


def rules_in_process(scorer: str) -> ModuleType:
    """An environment's scorer module imported in this process, for turns credo writes itself (an SFT's
    transcripts, tests): its `step` then reads credo's own text, never a model's, which only the sandbox reads."""
    spec = importlib.util.spec_from_file_location(f"credo_rules_{scorer}", SCORERS / f"{scorer}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
