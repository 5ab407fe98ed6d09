"""Tasks: prompts with ground truth, verifiers, and step checkers where the task has them."""

from credo.tasks.arith import ArithConfig, ArithTask
from credo.tasks.base import TASKS, THOUGHT_END, THOUGHT_INSTRUCTION, Problem, Task, Verdict
from credo.tasks.jsonl import JsonlConfig, JsonlTask


def build_task(options: dict) -> Task:
    """The task named by `options["name"]`, configured by the rest of `options`."""
    cls = TASKS.get(options.get("name", ""))
    return cls(cls.Config(**options))


__all__ = ["TASKS", "THOUGHT_END", "THOUGHT_INSTRUCTION", "ArithConfig", "ArithTask", "JsonlConfig", "JsonlTask", "Problem", "Task", "Verdict", "build_task"]
