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
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

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
_LISTS = {
    "binary_matrix": re.compile(rf"[\d\s]*|\s*{_list_of(_list_of(_INT))}\s*"),
    "spiral_matrix": re.compile(rf"[\d\s]*|\s*{_list_of(_INT)}\s*"),
    "string_insertion": re.compile(rf"\s*[A-Za-z]*\s*|\s*{_list_of(_LETTER)}\s*"),
    "n_queens": re.compile(rf"[Q_\s]*|\s*{_list_of(_list_of(_CELL))}\s*"),
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


def admits(dataset: str, answer: str, entry: dict[str, Any]) -> bool:
    """Whether `answer` may reach the dataset's scorer (always, for a scorer that evaluates nothing)."""
    grammar = GRAMMARS.get(dataset)
    return grammar is None or grammar(answer, entry)
