"""A scripted policy on the calculator: a one-chain calculator task whose episodes follow a fixed tree of turns, for
the tests of samplers that draw, reset or score multi-turn episodes (turn resets, IGPO's information gain)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections import Counter

import torch

from credo.rollout.generate import Completions, left_pad, right_pad
from credo.tasks.arith import Chain
from credo.tasks.base import Problem, Task
from credo.tasks.calculator import CalculatorEnvironment
from credo.testbed import END, build_tokenizer

CHAIN = Chain(start=12, steps=(("+", 5), ("-", 9), ("+", 3)))  # 12 -> 17 -> 08 -> 11
C1, C2, C3, CHECK, UNDO = "<call>12+5</call>", "<call>17-9</call>", "<call>8+3</call>", "<call>check</call>", \
    "<call>undo</call>"
WRONG, AFTER = "<call>17-8</call>", "<call>9+3</call>"  # a wrong call (-8), then a call true to its history
TREE = {  # the policy: the turns so far -> its next turn, the n-th time it meets that context (the last one after)
    (): [C1],
    (C1,): [CHECK, C2],  # the first draw checks and then errs (the seed); the others solve the chain
    (C1, CHECK): [WRONG, C2, UNDO, C2, UNDO],  # the seed's error, then the continuations: right, undo, right, undo
    (C1, CHECK, WRONG): [AFTER], (C1, CHECK, WRONG, AFTER): ["\\boxed{12}"],
    (C1, C2): [C3], (C1, C2, C3): ["\\boxed{11}"],
    (C1, CHECK, C2): [C3], (C1, CHECK, C2, C3): ["\\boxed{11}"],
    (C1, CHECK, UNDO): ["\\boxed{12}"],  # the undo takes back a right call; the answer comes too early
}
SEED = [C1, CHECK, WRONG, AFTER, "\\boxed{12}"]
RIGHT = [C1, C2, C3, "\\boxed{11}"]
PREFIX = "<call>12+5</call><obs>17</obs><call>check</call><obs>ok</obs>"  # the seed's turns before its first error


class TreeScript:
    """A generation backend that answers each episode's next turn from `TREE`, recording what it was asked."""

    def __init__(self, tree=TREE):
        self.tokenizer = build_tokenizer()
        self.tree, self.asked, self.calls = tree, Counter(), []

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        assert repeat == 1 and stop == ["</call>"]
        self.calls.append([list(p) for p in prompts])
        replies = []
        for ids in prompts:
            history = self.tokenizer.decode(ids).split("<|assistant|>", 1)[1]
            turns = tuple(re.findall(r"<call>[^<]*</call>|\\boxed\{[^}]*\}", history))
            options = self.tree[turns]
            reply = options[min(self.asked[turns], len(options) - 1)]
            self.asked[turns] += 1
            replies.append(self.tokenizer(reply + ("" if reply.endswith("</call>") else END),
                                          add_special_tokens=False)["input_ids"][:max_new_tokens])
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad(prompts, pad)
        r_ids, r_mask = right_pad(replies, pad)
        probs = torch.where(r_mask, torch.tensor(0.5), torch.tensor(0.0))
        return Completions(p_ids, p_mask, r_ids, r_mask, self.tokenizer.batch_decode(replies, skip_special_tokens=True),
                           torch.zeros(len(prompts), dtype=torch.bool), token_probs=probs, entropies=probs * 2)


BRANCHING = {  # the turns so far -> the policy's next turns, in turn (long enough for every test that uses it)
    (): [C1] * 200,
    (C1,): [C2, WRONG] * 100,  # after the first call the policy alternates: the right second call, a wrong one
    (C1, C2): [C3] * 200, (C1, C2, C3): ["\\boxed{11}"] * 200,
    (C1, WRONG): [AFTER] * 200, (C1, WRONG, AFTER): ["\\boxed{12}"] * 200,
}
"""Four-turn episodes: right (12+5, 17-9, 8+3, 11: reward 1) or wrong from the second call (17-8, 9+3, 12: 0), for
the samplers that branch episodes at their turns (Tree-GRPO's, ARPO's)."""


class CountingScript(TreeScript):
    """The scripted policy over `BRANCHING`, counting the tokens it generates; `entropy` (a reply -> the sampling
    entropy it reports on each of its tokens, or None: TreeScript's 1.0) sets the entropies an entropy-reading sampler
    sees."""

    def __init__(self, entropy=None):
        super().__init__(BRANCHING)
        self.generated, self.entropy = 0, entropy

    def generate(self, prompts, **kwargs):
        out = super().generate(prompts, **kwargs)
        self.generated += int(out.response_mask.sum())
        if self.entropy is None:
            return out
        entropies = torch.tensor([[self.entropy(text)] for text in out.texts]) * out.response_mask
        return dataclasses.replace(out, entropies=entropies)


class RecordingCalculator(CalculatorEnvironment):
    """The calculator, recording the states and turns of every batch it steps."""

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.seen = []

    def step_batch(self, states, turns):
        self.seen.append(([json.loads(json.dumps(s)) for s in states], list(turns)))
        return super().step_batch(states, turns)


def ids(tokenizer, text):
    """The token ids of `text` (no special tokens)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class Chains(Task):
    """A calculator task of the given chains in turn (`CHAIN` by default, with the recording calculator), with its
    per-turn checker (the oracle localiser's) or without."""

    name = "calculator-chain"

    def __init__(self, chains=(CHAIN,), environment=None, checks_steps=True):
        self.environment = environment if environment is not None else RecordingCalculator()
        self.checks_steps = checks_steps
        self.problems = [Problem(c.prompt, f"{c.values()[-1]:02d}", f"steps={len(c.steps)}", meta={"chain": c})
                         for c in chains]

    def train_problems(self, seed, start=0):
        return itertools.islice(itertools.cycle(self.problems), start, None)

    def eval_problems(self):
        return self.problems

    def verify(self, problem, response):
        raise AssertionError("an episode is scored by its environment, never by verify")
