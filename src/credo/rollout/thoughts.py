"""The thought MDP of RRPO/SRPO (arXiv 2605.25507; docs/methods.md sec. 4): responses as sequences of thoughts.

A thought ends at a delimiter (`</thought>`, kept in the text) or after `cap_tokens` tokens. An episode
ends after the first thought that contains the final-answer marker (`\\boxed{`), after `max_thoughts`
thoughts, or when the next thought would not fit the response budget (`budget_tokens`); an over-long
response is cut back to its last whole thought.

credo samples a whole response in one generation call and cuts it into thoughts afterwards. That draws
from the same distribution as generating thought by thought, because nothing is inserted at a thought
boundary (the next thought continues from exactly the same tokens), and it lets a batch generate at full
width instead of one thought at a time. The rules above are then applied to the token ids: `episode()`
returns the response cut at the episode's end and the thought index of every kept token.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from credo.schema import Section
from credo.tasks.base import THOUGHT_END


class ThoughtRules(Section):
    delimiter: str = THOUGHT_END
    """Text that closes a thought (kept in the thought)."""
    answer_marker: str = "\\boxed{"
    """A thought containing this ends the episode."""
    cap_tokens: int = Field(256, ge=1)
    """A thought without a delimiter ends after this many tokens."""
    max_thoughts: int = Field(20, ge=1)
    """An episode ends after this many thoughts."""
    budget_tokens: int = Field(5120, ge=1)
    """Response budget: a thought that would cross it is dropped with everything after it."""


@dataclass(frozen=True)
class Episode:
    ids: list[int]
    """The response tokens kept (whole thoughts only, unless the first thought alone breaks the budget)."""
    ends: list[int]
    """Token index one past the end of each thought (`ends[-1] == len(ids)`)."""
    reason: str
    """Why it ended: "answer", "max_thoughts", "budget", or "eos" (the response simply stopped)."""

    @property
    def num_thoughts(self) -> int:
        return len(self.ends)

    def segment_ids(self) -> list[int]:
        """The 0-based thought index of every token."""
        out, start = [], 0
        for index, end in enumerate(self.ends):
            out.extend([index] * (end - start))
            start = end
        return out

    def prefix(self, thoughts: int) -> list[int]:
        """The tokens of the first `thoughts` thoughts (0 gives an empty prefix)."""
        return self.ids[: self.ends[thoughts - 1]] if thoughts > 0 else []


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text of each token on its own (exact for the ASCII delimiter and marker; bytes of a multi-byte
    character decode to replacement characters, which never match them)."""
    return [tokenizer.decode([t]) for t in ids]


def split_thoughts(pieces: list[str], rules: ThoughtRules) -> list[int]:
    """Thought ends (token indices, exclusive) of a response given as per-token text pieces."""
    ends, text, start, thought_start_char = [], "", 0, 0
    for i, piece in enumerate(pieces):
        text += piece
        if rules.delimiter in text[thought_start_char:] or i + 1 - start >= rules.cap_tokens:
            ends.append(i + 1)
            start, thought_start_char = i + 1, len(text)
    if start < len(pieces):
        ends.append(len(pieces))
    return ends


def episode(ids: list[int], pieces: list[str], rules: ThoughtRules) -> Episode:
    """Apply the episode rules to a sampled response (its token ids and per-token text pieces)."""
    ends = split_thoughts(pieces, rules)
    kept: list[int] = []
    reason = "eos"
    start = 0
    for end in ends:
        if end > rules.budget_tokens:
            reason = "budget"
            break
        kept.append(end)
        if rules.answer_marker in "".join(pieces[start:end]):
            reason = "answer"
            break
        if len(kept) == rules.max_thoughts:
            reason = "max_thoughts" if end < len(ids) else "eos"
            break
        start = end
    if not kept and ends:  # the first thought alone breaks the budget: keep the budget's worth of it
        kept = [min(ends[0], rules.budget_tokens)]
    return Episode(ids[: kept[-1] if kept else 0], kept, reason)


def blame_start(pieces: list[str], wrong_step: int | None, rules: ThoughtRules) -> int:
    """The response token where thought `wrong_step` (0-based, a step checker's first wrong step) begins;
    -1 when no step is wrong. A step past the response's last thought (a missing step) begins at the
    response's last thought."""
    if wrong_step is None:
        return -1
    starts = [0] + split_thoughts(pieces, rules)[:-1]
    return starts[min(wrong_step, len(starts) - 1)]


def thought_verdicts(pieces: list[str], wrong_steps: tuple[int, ...] | None,
                     rules: ThoughtRules) -> tuple[list[int], list[bool]]:
    """The thought index of every response token and whether its thought is wrong, from a step checker's
    `wrong_steps` (0-based thoughts; None or empty: none wrong). A step past the response's last thought (a missing
    step or answer) is the last thought's, as in `blame_start`.

    >>> rules = ThoughtRules(delimiter="|", answer_marker="=")
    >>> thought_verdicts(["a", "|", "b", "|", "=", "1"], (1, 3), rules)
    ([0, 0, 1, 1, 2, 2], [False, False, True, True, True, True])
    """
    ends = split_thoughts(pieces, rules)
    ids = [index for index, (start, end) in enumerate(zip([0] + ends[:-1], ends)) for _ in range(end - start)]
    last = max(0, len(ends) - 1)
    wrong = {min(step, last) for step in wrong_steps or ()}
    return ids, [index in wrong for index in ids]
