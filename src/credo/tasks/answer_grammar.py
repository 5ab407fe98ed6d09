"""Strict grammars of the answers that reasoning-gym scorers evaluate: an answer outside its grammar is wrong.

Some of reasoning-gym's scorers pass the answer to sympy's `parse_expr` (an `eval`) or to `eval` itself. Such
an answer is checked here, in the caller's process, before it reaches the scorer (which runs sandboxed
anyway); `admits(dataset, answer, entry)` is False for an answer the dataset's answers cannot look like:

- `countdown`, `puzzle24`: integers, `+ - * /`, parentheses and spaces (no powers);
- `polynomial_multiplication`: integers and the entry's variables, `+ - * /`, parentheses, and `**` or `^`
  with a literal integer exponent of at most `MAX_EXPONENT`;
- `simple_integration`, `intermediate_integration`: the same in the entry's variable and `C`, decimals,
  exponents that may also be `(-p/q)`, and (intermediate) the functions in `FUNCTIONS` and `pi`, `E`;
- `binary_matrix`, `spiral_matrix`, `string_insertion`, `n_queens` (which `eval` a Python list as a fallback):
  the plain answer format, or a list literal of integers, of single letters, or of `"Q"`/`"_"` cells.

In expressions, a power's base may not itself contain a power (no `7**7**7**7`, no `(2**99)**99`), numbers
have at most `MAX_DIGITS` digits and an expression at most `MAX_EXPRESSION_CHARS` characters; a list
literal has at most `MAX_LIST_CHARS`. Other datasets' scorers compare or convert answers without
evaluating them: every answer is admitted.

The grammar is the one of the dataset whose scorer receives the answer: for a `composite` entry, the source
dataset it names (`scoring_dataset`). A dataset with an evaluating scorer and no grammar is found by
`guarded`, which the task config calls at validation.

Every check runs in time linear in the answer's length: list literals are matched by RE2 (`google-re2`, an
automaton without backtracking; Python's `re` took quadratic time on `[1` and spaces), and expressions are
read by a one-pass tokenizer and a recursive-descent parser over at most `MAX_EXPRESSION_CHARS` characters.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import re2

MAX_EXPRESSION_CHARS = 1000
MAX_LIST_CHARS = 100_000
MAX_DIGITS = 30
MAX_EXPONENT = 99
FUNCTIONS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                       "exp", "log", "sqrt"})
CONSTANTS = frozenset({"pi", "E"})

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z]\w{0,15})|(\*\*|[-+*/^()]))")


class _Reject(Exception):
    """The answer is outside the grammar."""


class _Parser:
    """Recursive descent over `expr := term (('+'|'-') term)*`, `term := factor (('*'|'/') factor)*`,
    `factor := ('+'|'-') factor | atom [('**'|'^') exponent]`, `atom := number | name | function '(' expr ')'
    | '(' expr ')'`; each rule returns whether its subtree holds a power."""

    def __init__(self, text: str, names: frozenset[str], functions: frozenset[str], powers: bool,
                 fractions: bool) -> None:
        self.tokens = _tokens(text)
        self.position = 0
        self.names, self.functions, self.powers, self.fractions = names, functions, powers, fractions

    def parse(self) -> None:
        self.expr()
        if self.position != len(self.tokens):
            raise _Reject

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, *expected: str) -> str:
        token = self.peek()
        if token is None or (expected and token not in expected):
            raise _Reject
        self.position += 1
        return token

    def expr(self) -> bool:
        return self.chain(self.term, ("+", "-"))

    def term(self) -> bool:
        return self.chain(self.factor, ("*", "/"))

    def chain(self, operand, operators: tuple[str, ...]) -> bool:
        """`operand (operator operand)*`; whether any operand held a power."""
        powered = operand()
        while self.peek() in operators:
            self.take()
            powered |= operand()
        return powered

    def factor(self) -> bool:
        if self.peek() in ("+", "-"):
            self.take()
            return self.factor()
        powered = self.atom()
        if self.peek() in ("**", "^"):
            if not self.powers or powered:  # no powers here, or a power of a power (a tower)
                raise _Reject
            self.take()
            self.exponent()
            return True
        return powered

    def exponent(self) -> None:
        grouped = self.peek() == "(" and self.fractions
        if grouped:
            self.take("(")
            if self.peek() == "-":
                self.take()
        self.small_integer()
        if grouped:
            if self.peek() == "/":
                self.take()
                self.small_integer()
            self.take(")")

    def small_integer(self) -> None:
        token = self.take()
        if not token.isdigit() or int(token) > MAX_EXPONENT:
            raise _Reject

    def atom(self) -> bool:
        token = self.take()
        if token == "(":
            powered = self.expr()
            self.take(")")
            return powered
        if token[0].isdigit():
            if len(token.replace(".", "")) > MAX_DIGITS or ("." in token and not self.fractions):
                raise _Reject
            return False
        if token in self.functions:
            self.take("(")
            powered = self.expr()
            self.take(")")
            return powered
        if token in self.names:
            return False
        raise _Reject


def _tokens(text: str) -> list[str]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _Reject
        tokens.append(match.group(match.lastindex))
        position = match.end()
    return tokens


def _expression(answer: str, names=frozenset(), functions=frozenset(), powers=False, fractions=False) -> bool:
    if len(answer) > MAX_EXPRESSION_CHARS or not all(n.isidentifier() and not n.startswith("_") for n in names):
        return False
    try:
        _Parser(answer, frozenset(names), functions, powers, fractions).parse()
    except (_Reject, RecursionError):  # RecursionError: parentheses nested deeper than any answer
        return False
    return True


def _list_of(item: str) -> str:
    return rf"\[\s*(?:{item}\s*,\s*)*(?:{item}\s*,?\s*)?\]"


_INT = r"-?\d{1,12}"
_LETTER = r"""(?:'[A-Za-z]'|"[A-Za-z]")"""
_CELL = r"""(?:'[Q_]'|"[Q_]")"""
_LISTS = {  # RE2: linear time whatever the input (these patterns backtrack quadratically in `re`)
    "binary_matrix": re2.compile(rf"[\d\s]*|\s*{_list_of(_list_of(_INT))}\s*"),
    "spiral_matrix": re2.compile(rf"[\d\s]*|\s*{_list_of(_INT)}\s*"),
    "string_insertion": re2.compile(rf"\s*[A-Za-z]*\s*|\s*{_list_of(_LETTER)}\s*"),
    "n_queens": re2.compile(rf"[Q_\s]*|\s*{_list_of(_list_of(_CELL))}\s*"),
}


def _list_literal(dataset: str) -> Callable[[str, dict], bool]:
    pattern = _LISTS[dataset]
    return lambda answer, entry: len(answer) <= MAX_LIST_CHARS and pattern.fullmatch(answer) is not None


def _variables(entry: dict[str, Any]) -> frozenset[str]:
    metadata = entry.get("metadata") or {}
    names = metadata.get("variables") or [metadata.get("variable", "x")]
    return frozenset(str(name) for name in names)


GRAMMARS: dict[str, Callable[[str, dict], bool]] = {
    "countdown": lambda answer, entry: _expression(answer),
    "puzzle24": lambda answer, entry: _expression(answer),
    "polynomial_multiplication": lambda answer, entry: _expression(answer, _variables(entry), powers=True),
    "simple_integration": lambda answer, entry: _expression(answer, _variables(entry) | {"C"}, powers=True,
                                                            fractions=True),
    "intermediate_integration": lambda answer, entry: _expression(
        answer, _variables(entry) | {"C"} | CONSTANTS, FUNCTIONS, powers=True, fractions=True),
    **{dataset: _list_literal(dataset) for dataset in _LISTS},
}
"""The datasets whose scorers evaluate the answer, and each one's grammar check `(answer, entry) -> bool`."""


COMPOSITE = "composite"
"""reasoning-gym's mixture of datasets: its scorer hands each entry to the scorer of the entry's source dataset."""

REVIEWED: dict[str, str] = {
    "advanced_geometry": "compares float() of the answer; sympy builds the problems",
    "basic_arithmetic": "eval() computes the problems' answers, the scorer compares strings",
    "bitwise_arithmetic": "eval() runs on the problem, the answer goes through int(answer, 0)",
    "codeio": "exec() generates the problems, the scorer reads the answer with json.loads",
    "number_sorting": "eval() may read the entry's own answer, the model's goes through json.loads",
    "polynomial_equations": "reads the answer with float() per comma-separated item; sympy builds the problems",
    "propositional_logic": "its own parser of P/Q/... formulas (named parse_expr), no eval",
    "simple_equations": "the default scorer (string comparison); sympy builds the problems",
}
"""Datasets whose scorer's module calls `eval`/`exec` or uses sympy, but whose scorer was read (reasoning-gym
0.1.25) and found never to evaluate the model's answer."""

_EVALUATES = re.compile(r"\b(?:eval|exec)\s*\(|parse_expr|sympify|\bsympy\b")


def evaluates(scorer: type) -> bool:
    """Whether the modules defining the dataset class `scorer` and its `score_answer` call `eval`/`exec` or use
    sympy (whose functions turn strings into code); True when their source cannot be read."""
    modules = {inspect.getmodule(scorer), inspect.getmodule(getattr(scorer, "score_answer", scorer))}
    try:
        return any(module is None or _EVALUATES.search(inspect.getsource(module)) for module in modules)
    except (OSError, TypeError):
        return True


def guarded(dataset: str, scorer: type) -> bool:
    """Whether `dataset` (scored by the class `scorer`) may be trained on: it has a grammar, was read and found to
    evaluate no answer (`REVIEWED`), or its scorer's modules hold no `eval`, `exec` or sympy (`evaluates`)."""
    return dataset in GRAMMARS or dataset in REVIEWED or not evaluates(scorer)


def scoring_dataset(dataset: str, entry: dict[str, Any]) -> str | None:
    """The dataset whose scorer receives answers to `entry` of `dataset`: the dataset itself, or for a composite
    the source dataset the entry names (as reasoning-gym's composite scorer reads it); None when a composite's
    entry names none (or names a composite)."""
    if dataset != COMPOSITE:
        return dataset
    source = (entry.get("metadata") or {}).get("source_dataset")
    return source if isinstance(source, str) and source != COMPOSITE else None


def admits(dataset: str, answer: str, entry: dict[str, Any]) -> bool:
    """Whether `answer` may reach the scorer of `dataset`'s `entry`: the grammar of the dataset that scores it
    (`scoring_dataset`) admits it, or that dataset has no grammar; never when no dataset scores it. Linear time."""
    scorer = scoring_dataset(dataset, entry)
    if scorer is None:
        return False
    grammar = GRAMMARS.get(scorer)
    return grammar is None or grammar(answer, entry)
