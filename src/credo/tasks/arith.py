"""The testbed task `arith`: multi-step arithmetic chains whose every step can be checked.

A problem is a start value and a chain of operations, evaluated left to right modulo 100:

    prompt    "07+5*3-4?"
    solution  "+5=12</thought>*3=36</thought>-4=32</thought>\\boxed{32}"

One operation per thought: the operator, the operand, `=`, and the two-digit value. Each step continues
from the value the previous thought *wrote*, so an early error propagates like a real reasoning error,
and the step checker knows the first wrong thought of every response.

With `worked: true` (the long-horizon regime) the prompt labels its steps a, b, c, ... and each thought names
its step and writes its work out column by column before its value, and with probability `p_check` restates the
step as a check (`worked_thought`):

    prompt    "37a+5b*7?"
    thought   "a+5|37+5|7+5=12|3+1=4|=42|chk 37+5=42</thought>"

the step's label and operation, the value it continues from and the operation again, the units column, the tens
column with the carry (or borrow) it took, the value, and the optional check: 21-34 tokens a thought instead of 6,
and a length that varies within a group. A misconception is then one written digit, the carry the tens column
takes, and the rest of the thought follows from it. The labels let a small model find a step's operation by its
name instead of counting thoughts of varying length.

The noise model (`Noise`) makes the starting policy (see `credo.testbed`) wrong in a way RL can fix:
*misconceptions* are step types that get one consistent wrong value with probability `p_misc`
(`carry`: an addition whose units digits carry drops the carry, -10; `borrow`: a subtraction that
borrows forgets it, +10; `mul7`: a multiplication by 7 is off by +10); every other step slips to a random
value with probability `p_slip`. Random slips alone spread their mass over many wrong values, so the
greedy policy is already right wherever it knows the step; systematic misconceptions make the greedy
mode wrong at exactly those steps (docs/testbed.md, secs. 1-2).

The held-out split is a hash of the prompt (crc32 % 10 == 0): train and eval never share a problem.
"""

from __future__ import annotations

import functools
import math
import random
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from credo.schema import Section
from credo.tasks.base import TASKS, THOUGHT_END, Problem, Verdict
from credo.tasks.rewards import CustomReward, RewardedTask, RewardOptions

MODULUS = 100
MAX_DRAWS = 100_000
"""Consecutive rejected draws after which a chain filter is declared unsatisfiable."""
REPEATS = 10_000
"""Consecutive draws of held-out problems already taken after which a split is declared exhausted."""
BOXED = "\\boxed{"
OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: (a + b) % MODULUS,
    "-": lambda a, b: (a - b) % MODULUS,
    "*": lambda a, b: (a * b) % MODULUS,
}


@dataclass(frozen=True)
class Misconception:
    """A step type with one consistent wrong value: `op` with operand test `applies`, off by `offset`."""

    op: str
    applies: Callable[[int, int], bool]
    default_offset: int


MISCONCEPTIONS: dict[str, Misconception] = {
    "carry": Misconception("+", lambda a, b: a % 10 + b % 10 >= 10, -10),
    "borrow": Misconception("-", lambda a, b: a % 10 < b % 10, +10),
    "mul7": Misconception("*", lambda a, b: b == 7, +10),
}


KEYED_OPS = ("+", "-")
"""The operations of chains with keyed misconceptions: added and subtracted errors shift every later value by their
offset, so positive offsets add up and cannot cancel (a multiplication would scale them)."""


class KeyedMisconceptions(Section):
    """Problem-specific misconceptions: `count` step types, each with its own consistent wrong value.

    Where the three named misconceptions are shared by every problem (a batch of 128 responses holds about a hundred
    instances of each, so outcome-level RL already knows each one's sign), keyed ones are many and specific: keyed on
    the operation and operand (`key: operand`: "every -4 is off", at most 18 types) or also on the units digit of the
    value the step continues from (`key: digits`: "+7 after a value ending in 3 is off", `count / 10` keys for each
    units digit, at most 180 types). Each key gets an offset in 1 .. `max_offset`, drawn with the keys from `seed`;
    the chains then add and subtract only (`KEYED_OPS`), so errors never cancel while `max_offset` times the longest
    chain stays below 100 (checked). `keyed_table` lists them.
    """

    count: int = Field(0, ge=0, le=180)
    """How many keyed misconceptions (0: none)."""
    key: Literal["operand", "digits"] = "digits"
    """What a type is keyed on: "operand" or "digits".

    "operand": the operation and operand (at most 18 types); "digits": also the units digit of the value the step
    continues from (at most 180, a multiple of 10)."""
    max_offset: int = Field(9, ge=1, le=99)
    """Each type's wrong value is the right one plus an offset drawn from 1 .. max_offset."""
    seed: int = 0
    """Seed of the keys and offsets (a different seed is a different set of misconceptions)."""

    @model_validator(mode="after")
    def _fits(self) -> KeyedMisconceptions:
        combos = len(KEYED_OPS) * 9
        if self.key == "operand" and self.count > combos:
            raise ValueError(f"keyed.count = {self.count}: operand keys are at most {combos} (+ and - with operands 1-9)")
        if self.key == "digits" and self.count % 10:
            raise ValueError(f"keyed.count = {self.count}: digit keys come count / 10 per units digit, so a multiple of 10")
        return self


@functools.lru_cache(maxsize=16)
def keyed_table(keyed: KeyedMisconceptions) -> dict[tuple[str, int, int | None], int]:
    """The keyed misconceptions: (op, operand, units digit of the value continued from, None for operand keys) ->
    offset, drawn from `keyed.seed` (operands 1-9).

    >>> table = keyed_table(KeyedMisconceptions(count=3, key="operand", seed=1))
    >>> len(table), all(units is None and 1 <= offset <= 9 for (_, _, units), offset in table.items())
    (3, True)
    >>> sorted({units for _, _, units in keyed_table(KeyedMisconceptions(count=20))})
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    rng = random.Random(f"keyed-{keyed.seed}")
    combos = [(op, b) for op in KEYED_OPS for b in range(1, 10)]
    if keyed.key == "operand":
        keys = [(op, b, None) for op, b in rng.sample(combos, keyed.count)]
    else:
        keys = [(op, b, units) for units in range(10) for op, b in rng.sample(combos, keyed.count // 10)]
    return {key: rng.randint(1, keyed.max_offset) for key in keys}


class Noise(Section):
    """How the SFT traces err (the starting policy's errors)."""

    misconceptions: dict[str, int] = Field(default_factory=lambda: {"carry": -10, "mul7": 10})
    """Active misconceptions and their value offsets (name -> offset mod 100); names: carry, borrow, mul7."""
    p_misc: float = Field(0.6, ge=0.0, le=1.0)
    """Probability that a step of a misconception type takes the misconception's wrong value."""
    p_slip: float = Field(0.03, ge=0.0, le=1.0)
    """Probability that any other step slips to a uniformly random wrong value."""
    offsets_may_cancel: bool = True
    """Whether misconceptions' offsets may undo each other (False: offsets that can are a config error).

    False rejects offsets of which a sum of 2 or more (repeats allowed, at most one per step of the longest
    chain) is 0 mod 100, so that misconceptions cannot undo each other (carry -10 and borrow +10 can). A single
    error can still vanish through later multiplications (an error of 50 times 2), so some lucky successes remain."""

    keyed: KeyedMisconceptions = KeyedMisconceptions()
    """Problem-specific misconceptions (many step types, each with its own offset) instead of the named ones."""

    @field_validator("misconceptions")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        for name, offset in value.items():
            if name not in MISCONCEPTIONS:
                raise ValueError(f"unknown misconception {name!r}; known: {', '.join(MISCONCEPTIONS)}")
            if offset % MODULUS == 0:
                raise ValueError(f"misconception {name!r} has offset {offset}, which is 0 mod {MODULUS}")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Noise:
        if self.keyed.count and self.misconceptions:
            raise ValueError("noise.keyed.count > 0 replaces the named misconceptions: set noise.misconceptions: {}")
        return self

    def misconception_at(self, op: str, a: int, b: int) -> tuple[str, int] | None:
        """The misconception that applies to the step `a op b`, if any: its name (a named one, or a keyed one's key
        such as `+7@3`, `+7` for an operand key) and its offset."""
        if self.keyed.count:
            table = keyed_table(self.keyed)
            for units in (a % 10, None):
                offset = table.get((op, b, units))
                if offset is not None:
                    return f"{op}{b}" + ("" if units is None else f"@{units}"), offset
            return None
        name = misconception_of(op, a, b, self.misconceptions)
        return None if name is None else (name, self.misconceptions[name])


def misconception_of(op: str, a: int, b: int, active: dict[str, int]) -> str | None:
    """The active misconception that applies to the step `a op b`, if any."""
    for name in active:
        m = MISCONCEPTIONS[name]
        if m.op == op and m.applies(a, b):
            return name
    return None


STEP_LABELS = "abcdefghijkl"
"""The labels of a worked chain's steps, in order (so a worked chain has at most 12 steps)."""


@dataclass(frozen=True)
class Chain:
    start: int
    steps: tuple[tuple[str, int], ...]
    worked: bool = False
    """Solved with worked thoughts (`worked_thought`): the prompt labels each step for the thoughts to name."""

    @property
    def prompt(self) -> str:
        labels = STEP_LABELS if self.worked else [""] * len(self.steps)
        return f"{self.start:02d}" + "".join(f"{label}{op}{b}" for label, (op, b) in zip(labels, self.steps)) + "?"

    def values(self) -> list[int]:
        """The correct value after each step."""
        out, value = [], self.start
        for op, b in self.steps:
            value = OPS[op](value, b)
            out.append(value)
        return out

    def misconception_steps(self, noise: Noise) -> int:
        """How many steps of the correct solution are of a misconception type of `noise`."""
        count, value = 0, self.start
        for op, b in self.steps:
            count += noise.misconception_at(op, value, b) is not None
            value = OPS[op](value, b)
        return count


def format_step(op: str, b: int, value: int) -> str:
    return f"{op}{b}={value:02d}{THOUGHT_END}"


def format_answer(value: int) -> str:
    return f"{BOXED}{value:02d}}}"


def worked_thought(label: str, op: str, a: int, b: int, value: int, check: bool = False) -> str:
    """The thought of step `label` that applies `op b` to the written value `a` and writes `value`, its work written
    out: the units column, then the tens column with the carry (`+`, `*`) or borrow (`-`) that makes its digit
    `value`'s, so a misconception's wrong value (carry -10, borrow +10, mul7 +10) shows as a wrong carry: the decision
    is one digit. A random slip, which may change the units digit too, writes the right units column and its wrong
    value. With `check`, the thought restates the step it wrote.

    >>> worked_thought("a", "+", 37, 5, 42), worked_thought("a", "+", 37, 5, 32)  # right; the carry dropped
    ('a+5|37+5|7+5=12|3+1=4|=42</thought>', 'a+5|37+5|7+5=12|3+0=3|=32</thought>')
    >>> worked_thought("b", "-", 32, 5, 27, check=True), worked_thought("c", "*", 37, 7, 69)  # borrow; mul7's carry
    ('b-5|32-5|12-5=7|3-1=2|=27|chk 32-5=27</thought>', 'c*7|37*7|7*7=49|3*7+5=26|=69</thought>')
    """
    tens, units = divmod(a, 10)
    written = value // 10
    if op == "+":
        carry = (written - tens) % 10
        work = f"{units}+{b}={units + b}|{tens}+{carry}={tens + carry}"
    elif op == "-":
        borrowed = 10 * (units < b)
        taken = (tens - written) % 10
        lent = 10 * (tens < taken)
        work = f"{units + borrowed}-{b}={units + borrowed - b}|{tens + lent}-{taken}={tens + lent - taken}"
    else:
        carry = units * b // 10 + (written - tens * b - units * b // 10) % 10
        work = f"{units}*{b}={units * b}|{tens}*{b}+{carry}={tens * b + carry}"
    text = f"{label}{op}{b}|{a:02d}{op}{b}|{work}|={value:02d}"
    return text + (f"|chk {a:02d}{op}{b}={value:02d}" if check else "") + THOUGHT_END


def solution(chain: Chain) -> str:
    return trace(chain, chain.values())


def trace(chain: Chain, values: list[int], checks: Sequence[bool] = ()) -> str:
    """The solution text that writes `values` (one per step) and boxes the last: compact thoughts, or for a worked
    chain worked ones (`worked_thought`), each ending with a check where `checks` (one flag per step) says so."""
    if not chain.worked:
        thoughts = [format_step(op, b, v) for (op, b), v in zip(chain.steps, values)]
    else:
        previous = [chain.start, *values[:-1]]
        flags = list(checks) or [False] * len(values)
        thoughts = [worked_thought(label, op, a, b, v, check)
                    for label, (op, b), a, v, check in zip(STEP_LABELS, chain.steps, previous, values, flags)]
    return "".join(thoughts) + format_answer(values[-1])


def noisy_values(chain: Chain, noise: Noise, rng: random.Random) -> list[int]:
    """The values a noisy solver writes, step by step, each from the previous written value."""
    values, written = [], chain.start
    for op, b in chain.steps:
        written = noisy_value(op, written, b, noise, rng)
        values.append(written)
    return values


def first_wrong_value(chain: Chain, values: list[int]) -> int | None:
    """The first step whose value is not the step applied to the previous written value (None: all right)."""
    written = chain.start
    for i, ((op, b), value) in enumerate(zip(chain.steps, values)):
        if value != OPS[op](written, b):
            return i
        written = value
    return None


def noisy_solution(chain: Chain, noise: Noise, rng: random.Random) -> tuple[str, int | None]:
    """A solution trace with the noise model's errors; returns it and its first wrong step (or None)."""
    values = noisy_values(chain, noise, rng)
    return trace(chain, values), first_wrong_value(chain, values)


def noisy_value(op: str, a: int, b: int, noise: Noise, rng: random.Random) -> int:
    """The value the noise model writes for `a op b`: its misconception's offset with probability
    `p_misc` where one applies, else a random slip with probability `p_slip`, else the right value."""
    right = OPS[op](a, b)
    misconception = noise.misconception_at(op, a, b)
    if misconception is not None:
        return (right + misconception[1]) % MODULUS if rng.random() < noise.p_misc else right
    return (right + rng.randrange(1, MODULUS)) % MODULUS if rng.random() < noise.p_slip else right


_STEP = re.compile(r"^([+\-*])(\d)=(\d\d)$")
_ANSWER = re.compile(r"\\boxed\{(\d+)\}")
ANSWER_DIGITS = 9
"""The most digits a right answer can have: a longer boxed answer is wrong (past 4,300 digits `int` would raise)."""
_WORKED_HEAD = re.compile(r"^([a-l])([+\-*])(\d)$")
_WORKED_VALUE = re.compile(r"^=(\d\d)$")
WORKED_PARTS = 5
"""A worked thought's `|`-separated parts before its optional check: step, restated step, units, tens, value."""


def read_thought(thought: str, worked: bool) -> tuple[str, str, int, int] | None:
    """The label (empty for a compact thought), operation, operand and written value of one thought (its text
    before `</thought>`), or None if it is malformed. A worked thought is read by its step and its value; its work
    is not judged (the value is).

    >>> read_thought("+5=42", False), read_thought("a+5|37+5|7+5=12|3+1=4|=42|chk 37+5=42", True)
    (('', '+', 5, 42), ('a', '+', 5, 42))
    >>> read_thought("a+5|37+5|=42", True) is None
    True
    """
    if not worked:
        match = _STEP.match(thought)
        return None if match is None else ("", match.group(1), int(match.group(2)), int(match.group(3)))
    parts = thought.split("|")
    if len(parts) == WORKED_PARTS + 1 and parts[-1].startswith("chk "):
        parts.pop()
    head = _WORKED_HEAD.match(parts[0])
    value = _WORKED_VALUE.match(parts[-1])
    if len(parts) != WORKED_PARTS or head is None or value is None:
        return None
    return head.group(1), head.group(2), int(head.group(3)), int(value.group(1))


def step_value(chain: Chain, i: int, thought: str) -> int | None:
    """The value thought `thought` writes if it is step `i` of `chain` in the chain's form (its operation, operand
    and, for a worked chain, its label), else None: the one reading of a thought that the checker and the
    decision count share."""
    read = read_thought(thought, chain.worked)
    if read is None or read[1:3] != chain.steps[i] or (chain.worked and read[0] != STEP_LABELS[i]):
        return None
    return read[3]


class ArithConfig(RewardOptions):
    """Options of the `arith` testbed task."""

    name: str = "arith"
    """The task's name in `task.name`: "arith"."""
    min_steps: int = Field(2, ge=1, le=len(STEP_LABELS))
    """Fewest operations in a training chain."""
    max_steps: int = Field(6, ge=1, le=len(STEP_LABELS))
    """Most operations in a training chain."""
    operand_max: int = Field(9, ge=1, le=9)
    """Operands are drawn from 1 .. operand_max (one digit)."""
    start_max: int = Field(9, ge=1, le=99)
    """Start values are drawn from 1 .. start_max."""
    eval_steps: tuple[Annotated[int, Field(ge=1)], ...] = Field((2, 4, 6), min_length=1)
    """Chain lengths of the held-out evaluation buckets."""
    eval_per_bucket: int = Field(200, ge=1)
    """Held-out problems per evaluation bucket."""
    eval_split: Literal["test", "validation"] = "test"
    """Which held-out problems evaluations use: "test" (the study's evaluation set) or "validation".

    The validation set is as many other held-out problems, disjoint from the test set and from training: a tuning
    study chooses on them, so a choice is not made on the problems that then confirm it."""
    min_misconception_steps: int = Field(0, ge=0)
    """Training (and eval) chains need at least this many steps of an active misconception type."""
    max_misconception_steps: int | None = Field(None, ge=0)
    """Training (and eval) chains hold at most this many steps of an active misconception type (None: any)."""
    worked: bool = False
    """Thoughts write their work out, column by column (the long-horizon regime).

    Prompts label their steps (`37a+5b*7?`) and each thought names its step and writes the units and tens columns,
    the carry taken and the value (`worked_thought`) instead of the compact `+5=42`: 21-34 tokens a thought instead
    of 6. The step checker reads this form; the testbed model's SFT writes it."""
    p_check: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a worked thought of the SFT traces ends with a check restating its step.

    The check (`|chk 37+5=42`) is a choice of length that does not change the answer, so lengths vary within a
    group. It needs `worked`; the step checker accepts thoughts with and without it."""
    invertible_steps: bool = False
    """Multiply only by operands coprime to 100 (1, 3, 7, 9), so that no later step can remove an error.

    Every step then maps the value it continues from one-to-one, so a wrong value changes every later value and
    the answer (with all operands, x 5 maps 12 and 32 to 60 alike)."""
    decision_rate: float | None = Field(None, ge=0.0, le=1.0)
    """With keyed misconceptions (`noise.keyed`), the probability that a step is of a keyed type; None: uniform.

    A step of a keyed type is an uncertain decision, so a chain of n steps holds about `decision_rate * n` of them
    (drawn among the types that apply to the value so far); None draws operations uniformly."""
    noise: Noise = Noise()
    """The noise model: which misconceptions exist (also what the step checker calls a misconception)."""

    @model_validator(mode="after")
    def _ordered(self) -> ArithConfig:
        if self.min_steps > self.max_steps:
            raise ValueError(f"min_steps = {self.min_steps} exceeds max_steps = {self.max_steps}")
        if self.min_misconception_steps > min(self.max_steps, *self.eval_steps):
            raise ValueError(
                f"min_misconception_steps = {self.min_misconception_steps} exceeds the length of some chains "
                f"(max_steps {self.max_steps}, eval_steps {list(self.eval_steps)}): no chain could pass the filter"
            )
        longest = max(self.max_steps, *self.eval_steps)
        cancelling = None if self.noise.offsets_may_cancel else cancelling_offsets(self.noise.misconceptions, longest)
        if cancelling:
            raise ValueError(
                f"noise.offsets_may_cancel = false, but the misconceptions {' + '.join(cancelling)} can cancel "
                f"within {longest} steps (their offsets sum to 0 mod {MODULUS}); choose offsets of one sign whose "
                f"{longest}-fold largest stays below {MODULUS}, e.g. all -10"
            )
        if self.max_misconception_steps is not None and self.max_misconception_steps < self.min_misconception_steps:
            raise ValueError(f"max_misconception_steps = {self.max_misconception_steps} is below "
                             f"min_misconception_steps = {self.min_misconception_steps}: no chain could pass the filter")
        if self.invertible_steps and not any(math.gcd(b, MODULUS) == 1 for b in range(2, self.operand_max + 1)):
            raise ValueError(f"invertible_steps with operand_max = {self.operand_max} leaves only x 1 to multiply by; "
                             "raise operand_max to 3 or more")
        if self.worked and longest > len(STEP_LABELS):
            raise ValueError(f"worked chains label their steps {STEP_LABELS[0]}..{STEP_LABELS[-1]}: at most "
                             f"{len(STEP_LABELS)} steps, but max_steps / eval_steps reach {longest}")
        if self.p_check and not self.worked:
            raise ValueError(f"p_check = {self.p_check} needs worked: true (a compact thought has no check)")
        keyed = self.noise.keyed
        if self.min_misconception_steps and not (self.noise.misconceptions or keyed.count):
            raise ValueError("min_misconception_steps > 0 needs at least one misconception in noise.misconceptions "
                             "or noise.keyed")
        if self.decision_rate is not None and not keyed.count:
            raise ValueError(f"decision_rate = {self.decision_rate} needs keyed misconceptions (noise.keyed.count > 0)")
        if keyed.count and not self.noise.offsets_may_cancel and keyed.max_offset * longest >= MODULUS:
            raise ValueError(f"noise.offsets_may_cancel = false, but keyed offsets up to {keyed.max_offset} over "
                             f"{longest} steps can sum to {MODULUS}: lower noise.keyed.max_offset below "
                             f"{-(-MODULUS // longest)}")
        if keyed.count and (self.worked or self.invertible_steps):
            raise ValueError("keyed misconceptions take compact chains of additions and subtractions: worked and "
                             "invertible_steps do not apply")
        return self


def cancelling_offsets(offsets: dict[str, int], max_terms: int) -> list[str] | None:
    """Names of 2 to `max_terms` misconceptions (repeats allowed) whose offsets sum to 0 mod 100, or None.

    >>> cancelling_offsets({"carry": -10, "borrow": 10}, 6)
    ['carry', 'borrow']
    >>> cancelling_offsets({"carry": -10, "borrow": -10, "mul7": -10}, 6) is None
    True
    """
    reachable: dict[int, list[str]] = {offset % MODULUS: [name] for name, offset in offsets.items()}  # one term
    for _ in range(max_terms - 1):
        grown: dict[int, list[str]] = {}
        for total, names in reachable.items():
            for name, offset in offsets.items():
                grown.setdefault((total + offset) % MODULUS, names + [name])
        if 0 in grown:
            return grown[0]
        reachable = grown
    return None


def is_held_out(prompt: str) -> bool:
    return zlib.crc32(prompt.encode()) % 10 == 0


@TASKS.register("arith")
class ArithTask(RewardedTask):
    """The step-verifiable testbed task (see the module docstring)."""

    name = "arith"
    checks_steps = True
    Config = ArithConfig

    def __init__(self, config: ArithConfig | None = None) -> None:
        self.config = config or ArithConfig()
        self.custom_reward = CustomReward.of(self.config)

    # ---------------------------------------------------------------------------------- problems
    def write(self, chain: Chain, values: list[int], rng: random.Random) -> str:
        """The solution text that writes `values` in the task's form (`trace`); worked thoughts take their checks
        from `rng` with probability `p_check` (compact ones draw nothing from it)."""
        if not self.config.worked:
            return trace(chain, values)
        return trace(chain, values, [rng.random() < self.config.p_check for _ in values])

    def random_chain(self, rng: random.Random, steps: int) -> Chain:
        """A chain of `steps` uniform operations; with keyed misconceptions, `keyed_chain`."""
        if self.config.noise.keyed.count:
            return self.keyed_chain(rng, steps)
        ops = list(OPS)
        operands = range(1, self.config.operand_max + 1)
        factors = [b for b in operands if math.gcd(b, MODULUS) == 1] if self.config.invertible_steps else operands

        def step() -> tuple[str, int]:
            op = rng.choice(ops)
            return op, rng.choice(factors) if op == "*" else rng.choice(operands)

        return Chain(start=rng.randint(1, self.config.start_max), steps=tuple(step() for _ in range(steps)),
                     worked=self.config.worked)

    def keyed_chain(self, rng: random.Random, steps: int) -> Chain:
        """A chain of additions and subtractions (`KEYED_OPS`) whose every step is, with probability `decision_rate`,
        of a keyed misconception's type that applies to the value so far (drawn uniformly among them), and otherwise
        an ordinary step (uniform among the others); None: uniform operations, decisions where they fall."""
        cfg = self.config
        combos = [(op, b) for op in KEYED_OPS for b in range(1, cfg.operand_max + 1)]
        value = start = rng.randint(1, cfg.start_max)
        chosen = []
        for _ in range(steps):
            keyed = [c for c in combos if cfg.noise.misconception_at(c[0], value, c[1]) is not None]
            ordinary = [c for c in combos if c not in keyed]
            if cfg.decision_rate is None:
                pool = combos
            else:
                pool = keyed if keyed and (not ordinary or rng.random() < cfg.decision_rate) else ordinary
            op, b = rng.choice(pool)
            chosen.append((op, b))
            value = OPS[op](value, b)
        return Chain(start=start, steps=tuple(chosen), worked=cfg.worked)

    def _chains(self, rng: random.Random, steps: Callable[[], int], held_out: bool) -> Iterator[Chain]:
        """Chains of the split that pass the misconception filter (an error if the filter starves)."""
        cfg = self.config
        fewest, most = cfg.min_misconception_steps, cfg.max_misconception_steps
        misses = 0
        while True:
            chain = self.random_chain(rng, steps())
            count = chain.misconception_steps(cfg.noise)
            if is_held_out(chain.prompt) != held_out or count < fewest or (most is not None and count > most):
                misses += 1
                if misses > MAX_DRAWS:
                    raise ValueError(
                        f"arith: {MAX_DRAWS} draws in a row failed the filters (held-out split, "
                        f"min_misconception_steps = {fewest}, max_misconception_steps = {most}); relax the task config"
                    )
                continue
            misses = 0
            yield chain

    def problem(self, chain: Chain) -> Problem:
        return Problem(
            prompt=chain.prompt,
            answer=f"{chain.values()[-1]:02d}",
            difficulty=f"steps={len(chain.steps)}",
            meta={"chain": chain},
        )

    def train_problems(self, seed: int, start: int = 0) -> Iterator[Problem]:
        rng = random.Random(seed)
        cfg = self.config
        chains = self._chains(rng, lambda: rng.randint(cfg.min_steps, cfg.max_steps), held_out=False)
        for index, chain in enumerate(chains):
            if index >= start:
                yield self.problem(chain)

    def eval_problems(self) -> list[Problem]:
        """`eval_per_bucket` distinct held-out problems per chain length in `eval_steps`: the test set, or with
        `eval_split: validation` as many others, disjoint from it (drawn from their own seed)."""
        out = []
        for steps in self.config.eval_steps:
            test = self._held_out_bucket(steps, "eval", set(), "test")
            if self.config.eval_split == "validation":
                out += self._held_out_bucket(steps, "validation", {p.prompt for p in test}, "validation")
            else:
                out += test
        return out

    def _held_out_bucket(self, steps: int, name: str, excluded: set[str], split: str) -> list[Problem]:
        """`eval_per_bucket` distinct held-out problems of `steps` steps drawn from the seed `name-steps`, none of
        them in `excluded` (an error naming the `split` if `REPEATS` draws in a row find no new one)."""
        rng = random.Random(f"{name}-{steps}")
        seen, out, repeats = set(excluded), [], 0
        for chain in self._chains(rng, lambda: steps, held_out=True):
            if chain.prompt in seen:
                repeats += 1
                if repeats > REPEATS:
                    raise ValueError(f"arith: fewer than {self.config.eval_per_bucket} distinct held-out {steps}-step "
                                     f"problems for the {split} split; lower eval_per_bucket")
                continue
            repeats = 0
            seen.add(chain.prompt)
            out.append(self.problem(chain))
            if len(out) == self.config.eval_per_bucket:
                return out
        return out

    # ------------------------------------------------------------------------------ verification
    def own_verify(self, problem: Problem, response: str) -> Verdict:
        """Reward 1 when the last boxed value is the chain's answer; the step checker's first wrong thought."""
        chain: Chain = problem.meta["chain"]
        answers = _ANSWER.findall(response)
        correct = bool(answers) and len(answers[-1]) <= ANSWER_DIGITS and int(answers[-1]) == int(problem.answer)
        errors = list(self.step_errors(chain, response))
        first_wrong, kind = errors[0] if errors else (None, None)
        return Verdict(reward=float(correct), correct=correct, first_wrong_step=first_wrong, error_kind=kind,
                       wrong_steps=self.wrong_thoughts(response, errors))

    @staticmethod
    def wrong_thoughts(response: str, errors: list[tuple[int, str]]) -> tuple[int, ...]:
        """Every wrong thought of `response` from its `step_errors`: each wrong step, and from a malformed thought or
        a wrong answer on, every thought the response still writes (none of them is a step of the chain).

        >>> ArithTask.wrong_thoughts("+5=42</thought>+3=45</thought>x</thought>\\boxed{45}", [(2, "format")])
        (2, 3)
        """
        thoughts = response.count(THOUGHT_END) + 1
        wrong = [i for i, kind in errors if kind not in ("format", "answer")]
        if errors and errors[-1][1] in ("format", "answer"):
            wrong += range(errors[-1][0], max(thoughts, errors[-1][0] + 1))
        return tuple(wrong)

    def decisions(self, chain: Chain, response: str) -> list[str]:
        """The misconception types of the well-formed thoughts of `response` that apply a step of such a type to the
        value the thought before wrote: the response's uncertain decisions (where the noise model errs with
        `p_misc`), by type."""
        types, written = [], chain.start
        for i, thought in enumerate(response.split(THOUGHT_END)[:-1][:len(chain.steps)]):
            value = step_value(chain, i, thought)
            if value is None:
                break
            op, b = chain.steps[i]
            misconception = self.config.noise.misconception_at(op, written, b)
            if misconception is not None:
                types.append(misconception[0])
            written = value
        return types

    def wrong_steps(self, chain: Chain, response: str) -> int:
        """How many thoughts of `response` are wrong (`step_errors`)."""
        return sum(1 for _ in self.step_errors(chain, response))

    def first_wrong_step(self, chain: Chain, response: str) -> tuple[int | None, str | None]:
        """The first wrong thought of `response` and what it was, or (None, None) if every step is right."""
        return next(self.step_errors(chain, response), (None, None))

    def step_errors(self, chain: Chain, response: str) -> Iterator[tuple[int, str]]:
        """Each wrong thought of `response` and what it was (a misconception's name, "slip", "format", "answer").

        Thought `i < n` must be step `i` of the chain applied to the value thought `i-1` wrote, so each thought is
        judged against the one before it. A malformed thought ("format") ends the reading: nothing after it can be
        read as a step. Thought `n` must be the boxed last written value, and nothing may follow it ("answer").
        """
        thoughts = response.split(THOUGHT_END)
        written = chain.start
        for i, (op, b) in enumerate(chain.steps):
            value = step_value(chain, i, thoughts[i]) if i < len(thoughts) - 1 else None
            if value is None:
                yield i, "format"
                return
            right = OPS[op](written, b)
            if value != right:
                misconception = self.config.noise.misconception_at(op, written, b)
                is_misconception = misconception is not None and value == (right + misconception[1]) % MODULUS
                yield i, misconception[0] if is_misconception else "slip"
            written = value
        if len(thoughts) != len(chain.steps) + 1 or thoughts[-1] != format_answer(written):
            yield len(chain.steps), "answer"
