"""Tasks: prompts with ground truth, verifiers, and step checkers where the task has them."""

from credo.tasks.arith import ArithConfig, ArithTask
from credo.tasks.base import (
    TASKS,
    THOUGHT_END,
    THOUGHT_INSTRUCTION,
    Problem,
    Task,
    Verdict,
    sandbox_failures,
    task_class,
    task_names,
    unscored_count,
    verify_all,
)
from credo.tasks.calculator import CalculatorConfig, CalculatorTask
from credo.tasks.chat import ChatPrompt
from credo.tasks.dataset import DatasetConfig, DatasetTask
from credo.tasks.guessing import GuessingConfig, GuessingTask
from credo.tasks.jsonl import JsonlConfig, JsonlTask
from credo.tasks.reasoning_gym import ReasoningGymConfig, ReasoningGymTask
from credo.tasks.rewards import CustomReward, RewardFunction, RewardOptions


def build_task(options: dict) -> Task:
    """The task named by `options["name"]` ("arith", "reasoning_gym:chain_sum", ...), configured by the rest."""
    cls = task_class(options.get("name", ""))
    return cls(cls.Config(**options))


__all__ = [
    "TASKS", "THOUGHT_END", "THOUGHT_INSTRUCTION", "ArithConfig", "ArithTask", "CalculatorConfig", "CalculatorTask",
    "ChatPrompt", "CustomReward", "DatasetConfig", "DatasetTask", "GuessingConfig", "GuessingTask", "JsonlConfig",
    "JsonlTask", "Problem", "ReasoningGymConfig", "ReasoningGymTask", "RewardFunction", "RewardOptions", "Task",
    "Verdict", "build_task", "sandbox_failures", "task_class", "task_names", "unscored_count", "verify_all",
]
