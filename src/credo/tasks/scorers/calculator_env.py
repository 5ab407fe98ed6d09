"""The calculator environment's turns, read in a sandbox worker (`credo.tasks.calculator`): an arithmetic chain
solved through a calculator the policy must call with the right operation and operands.

Turns (the testbed's compact form; a turn ends at `</call>`, an answer at the end token):

- `<call>12-3</call>`: the calculator computes the call faithfully (modulo the chain's modulus, as the chain's
  steps are) and answers `<obs>9</obs>`; the call is the
  policy's attempt at the chain's next step, right when it applies that step's operation and operand to the value
  the calculator last returned (the start value before the first call);
- `<call>check</call>`: answers `<obs>ok</obs>` when the current value is the chain's value after the steps taken
  so far, else `<obs>no</obs>`; it decides nothing (`correct` None) and costs a turn;
- `<call>undo</call>`: takes back the last call (`<obs>v</obs>` with the value before it); right when the call it
  takes back was wrong;
- a call's turn reward, where the state holds a positive `call_reward`: that reward when the calculator's result is the
  chain's true value after the steps taken (MT-GRPO's verifiable turn reward: the gold intermediate value shows in the
  tool's result), else 0 (a call past the chain's end too); no turn reward without it;
- `\\boxed{v}`: the final answer; the episode ends with reward 1 when `v` is the chain's answer; the turn is right
  when every step was taken and `v` is the calculator's current value (a right answer to a wrong history is the
  history's fault, not the answer's);
- anything else: `<obs>?</obs>`, a wrong turn.

This module imports nothing of credo: it runs in the sandbox's child, the only code that reads the policy's text.
"""

from __future__ import annotations

import re

SHARED_CHILD = ("step",)
"""`step` reads a turn as data with one bounded regular expression and keeps nothing: the turns of one batch share
a confined child (`credo.tasks.sandbox_worker`), each under its own time bound."""

MAX_DIGITS = 6
_CALL = re.compile(r"\s*<call>(?:(check|undo)|(-?\d{1,%d})([+*-])(\d{1,%d}))</call>\s*" % (MAX_DIGITS, MAX_DIGITS))
_ANSWER = re.compile(r"\\boxed\{(-?\d{1,%d})\}" % MAX_DIGITS)


def step(state: dict, turn: str) -> dict:
    """The outcome of one turn (`credo.tasks.environment.TurnOutcome`'s fields) for the episode in `state`:
    `{"start", "ops": [[op, operand], ...], "modulus", "answer", "value", "taken", "history": [[value, right], ...]}`
    and optionally `"call_reward"` (`taken`: the calls standing, the undone ones taken back; `history`: each standing
    call's value before it and whether it was right)."""
    state = {**state, "history": [list(h) for h in state["history"]]}
    ops, taken = state["ops"], state["taken"]
    answer = _ANSWER.search(turn)
    call = _CALL.fullmatch(turn) if answer is None else None
    if answer is not None:
        value = int(answer.group(1))
        right = taken == len(ops) and value == state["value"]
        return {"observation": "", "done": True, "state": state, "kind": "answer", "correct": right,
                "reward": float(value == state["answer"])}
    if call is None:
        return {"observation": "<obs>?</obs>", "done": False, "state": state, "kind": "invalid", "correct": False}
    word = call.group(1)
    if word == "check":
        return {"observation": "<obs>ok</obs>" if state["value"] == _value_after(state, taken) else "<obs>no</obs>",
                "done": False, "state": state, "kind": "check", "correct": None}
    if word == "undo":
        if not state["history"]:
            return {"observation": "<obs>?</obs>", "done": False, "state": state, "kind": "invalid", "correct": False}
        before, undone_right = state["history"].pop()
        state.update(value=before, taken=taken - 1)
        return {"observation": f"<obs>{before}</obs>", "done": False, "state": state, "kind": "undo",
                "correct": not undone_right}
    a, op, b = int(call.group(2)), call.group(3), int(call.group(4))
    right = taken < len(ops) and a == state["value"] and [op, b] == list(ops[taken])
    result = _apply(op, a, b, state["modulus"])
    state["history"].append([state["value"], right])
    state.update(value=result, taken=taken + 1)
    reply = {"observation": f"<obs>{result}</obs>", "done": False, "state": state, "kind": "call", "correct": right}
    if state.get("call_reward", 0) > 0:
        shows_truth = taken < len(ops) and result == _value_after(state, taken + 1)
        reply["turn_reward"] = state["call_reward"] if shows_truth else 0.0
    return reply


def _value_after(state: dict, steps: int) -> int:
    """The chain's true value after its first `steps` steps (past the chain's end: its answer)."""
    value = state["start"]
    for op, operand in state["ops"][:steps]:
        value = _apply(op, value, operand, state["modulus"])
    return value


def _apply(op: str, a: int, b: int, modulus: int) -> int:
    return (a + b if op == "+" else a - b if op == "-" else a * b) % modulus
