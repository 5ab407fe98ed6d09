"""The calculator environment: an arithmetic chain (`credo.tasks.arith`) solved through a calculator tool.

The policy calls the calculator once per step with the operation and operands it decides on (`<call>12-3</call>`),
may check its current value or take a call back, and ends with `\\boxed{v}`; the calculator computes each call
faithfully, so every error is a decision in a call, and the per-turn checker (`scorers/calculator_env.py`) knows
which call was wrong: a call is right when it applies the chain's next step to the value the calculator last
returned, whatever came before. A check or an undo does not decide the reward, so the number of turns varies
within a group. The turns are read behind the scorer sandbox.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from credo.tasks.arith import BOXED, MODULUS, ArithConfig, ArithTask, Chain, Noise, format_answer
from credo.tasks.base import TASKS, Problem
from credo.tasks.environment import GoldAnswer, SandboxedEnvironment, rules_in_process

TURN_END = "</call>"
"""The marker that ends a call turn (an answer turn ends at the end token)."""
CALL_WORDS = ("<call>", TURN_END, "<obs>", "</obs>")
"""The calculator's markers (single tokens of the agent testbed's tokenizer, `credo.testbed.AgentJob`)."""
PROMPT_PREFIX = "calc "
"""What marks a chain as one to solve through the calculator (one testbed model could learn both forms)."""


def calculator_prompt(chain_prompt: str) -> str:
    """The calculator episode's prompt for an arithmetic chain's prompt."""
    return PROMPT_PREFIX + chain_prompt


class CalculatorEnvironment(SandboxedEnvironment):
    """Episodes of a chain's steps through the calculator; `max_turns` bounds the calls, checks, undos and the
    answer together."""

    def __init__(self, max_turns: int, turn_tokens: int = 24, step_seconds: float = 1.0,
                 call_reward: float = 0.0) -> None:
        super().__init__("calculator_env", TURN_END, max_turns, turn_tokens, step_seconds)
        self.call_reward = call_reward

    def reset(self, problem: Problem) -> dict[str, Any]:
        return start_state(problem, self.call_reward)

    def anchor(self, state: Mapping[str, Any]) -> str:
        """The calculator as the policy meets it: the steps taken and the value shown (not how it got there)."""
        return f"{state['taken']}:{state['value']}"

    def gold_answer(self, problem: Problem) -> GoldAnswer:
        """The answer turn `\\boxed{v}` with the chain's answer (as `format_answer` writes it)."""
        return GoldAnswer(BOXED, problem.answer)


def start_state(problem: Problem, call_reward: float = 0.0) -> dict[str, Any]:
    """An episode's state: the chain (`problem.meta["chain"]`), its answer, the calculator at the start, and the
    turn reward of a call whose result is the chain's true value (0: no turn rewards)."""
    chain: Chain = problem.meta["chain"]
    state = {"start": chain.start, "ops": [[op, b] for op, b in chain.steps], "modulus": MODULUS,
             "answer": int(problem.answer), "value": chain.start, "taken": 0, "history": []}
    return {**state, "call_reward": call_reward} if call_reward > 0 else state


_RULES = rules_in_process("calculator_env")


class CalculatorConfig(ArithConfig):
    """The arithmetic chain's options (`ArithConfig`) and the episode's: its turn limit and a turn's length."""

    max_turns: int = Field(24, ge=1)
    """The most turns of an episode (calls, checks, undos and the answer); one that reaches it earns 0."""
    turn_tokens: int = Field(24, ge=8)
    """The most tokens of one turn (a call of two 6-digit operands fits in 27)."""
    call_reward: float = Field(0.0, ge=0.0)
    """A call's turn reward when its result is the chain's true value after the steps taken; 0: no turn rewards.

    MT-GRPO's verifiable turn reward: the gold intermediate value in the tool's result."""

    @field_validator("reward", mode="before")
    @classmethod
    def _scored_by_the_environment(cls, reward):  # before the functions are imported: none is needed
        if reward is not None:
            raise ValueError("the calculator's episodes are scored by its environment (the chain's answer); "
                             "task.reward does not apply to them")
        return reward


@TASKS.register("calculator")
class CalculatorTask(ArithTask):
    """The arithmetic chain solved through the calculator (`CalculatorEnvironment`): each response is an episode of
    calls, checks and undos and the answer, scored by the environment, each call judged by the per-turn checker
    (`checks_steps`: an episode's wrong turns are its wrong steps). Prompts are the chain's prefixed with
    `PROMPT_PREFIX`."""

    name = "calculator"
    multi_turn = True
    Config = CalculatorConfig

    def __init__(self, config: CalculatorConfig | None = None) -> None:
        super().__init__(config or CalculatorConfig())
        self.environment = CalculatorEnvironment(self.config.max_turns, self.config.turn_tokens,
                                                 call_reward=self.config.call_reward)

    def problem(self, chain: Chain) -> Problem:
        single = super().problem(chain)
        return dataclasses.replace(single, prompt=calculator_prompt(single.prompt))


def noisy_call(op: str, a: int, b: int, noise: Noise, rng: random.Random) -> str:
    """The call a noisy solver writes for the step `a op b`: with probability `p_misc`, where a misconception
    applies, the running value misread by the misconception's offset (`a + offset`, mod 100: an added or subtracted
    step's result moves by the offset, so errors cannot cancel where the offsets cannot); with probability `p_slip`
    elsewhere a running value misread at random; else the right call."""
    misconception = noise.misconception_at(op, a, b)
    if misconception is not None:
        if rng.random() < noise.p_misc:
            a = (a + misconception[1]) % MODULUS
    elif rng.random() < noise.p_slip:
        a = (a + rng.randrange(1, MODULUS)) % MODULUS
    return f"<call>{a}{op}{b}</call>"


def noisy_transcript(problem: Problem, noise: Noise, rng: random.Random, *, p_check: float, p_undo: float,
                     max_turns: int) -> tuple[list[str], list[str]]:
    """An SFT transcript of the calculator episode of `problem`: the turns a noisy solver writes (`noisy_call`
    for each step, from the value the calculator returned; after a call, a check with probability `p_check`, and
    after a check that says "no", an undo with probability `p_undo` and the call again) and the calculator's
    observation after each turn but the last ("" there). It answers the calculator's last value when every step is
    taken, or when the turns left just suffice for the answer."""
    state = start_state(problem)
    turns, observations = [], []

    def play(turn: str) -> dict:
        nonlocal state
        reply = _RULES.step(state, turn)
        state = reply["state"]
        turns.append(turn)
        observations.append(reply["observation"])
        return reply

    steps = problem.meta["chain"].steps
    while state["taken"] < len(steps) and len(turns) < max_turns - 1:
        op, b = steps[state["taken"]]
        play(noisy_call(op, state["value"], b, noise, rng))
        if len(turns) < max_turns - 1 and rng.random() < p_check:
            checked = play("<call>check</call>")
            if checked["observation"] == "<obs>no</obs>" and len(turns) < max_turns - 1 and rng.random() < p_undo:
                play("<call>undo</call>")
    play(format_answer(state["value"]))
    return turns, observations
