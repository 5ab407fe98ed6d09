"""A scripted stand-in for the policy's generation engine, and arith chains to script it with."""

from __future__ import annotations

from collections import Counter

import torch

from credo.rollout.generate import Completions, left_pad, right_pad
from credo.tasks.arith import OPS, Chain, format_answer, format_step, solution
from credo.testbed import END, build_tokenizer


class ScriptedPolicy:
    """Answers each generation call from a script: `draw(problem_prompt)` for fresh draws, `continue_(text)`
    for continuations after a prefix, `localise(text)` for localiser prompts, `revise(text)` for revision
    prompts. A script may return `(text, True)` for a reply cut at the token budget (no end token). Records
    the calls as (rows, repeat, greedy), each call's `max_new_tokens` and the user texts of revision requests."""

    def __init__(self, draw, continue_=None, localise=None, revise=None):
        self.tokenizer = build_tokenizer()
        self.draw, self.continue_, self.localise, self.revise = draw, continue_, localise, revise
        self.calls = []
        self.budgets = []
        self.revision_requests = []

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, repeat=1, stop=None):
        self.calls.append((len(prompts), repeat, greedy))
        self.budgets.append(max_new_tokens)
        replies = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            user = text.split("<|user|>")[1].split("<|end|>")[0]
            after = text.split("<|assistant|>", 1)[1]
            for _ in range(repeat):
                if "first went wrong" in user:
                    replies.append(self.localise(user))
                elif user.startswith("revise? ") or "Wrong attempt:" in user:
                    self.revision_requests.append(user)
                    replies.append(self.revise(user))
                elif after:
                    replies.append(self.continue_(user, after))
                else:
                    replies.append(self.draw(user))
        replies = [r if isinstance(r, tuple) else (r, False) for r in replies]
        texts = [text for text, _ in replies]
        responses = [self.tokenizer(t + ("" if cut else END), add_special_tokens=False)["input_ids"] for t, cut in replies]
        pad = self.tokenizer.pad_token_id
        p_ids, p_mask = left_pad([p for p in prompts for _ in range(repeat)], pad)
        r_ids, r_mask = right_pad(responses, pad)
        return Completions(p_ids, p_mask, r_ids, r_mask, texts, torch.tensor([cut for _, cut in replies]))


def wrong_at(chain: Chain, index: int, offset: int = 1) -> str:
    """The chain's solution with step `index` (0-based) off by `offset`, later steps continuing from it."""
    parts, value = [], chain.start
    for i, (op, b) in enumerate(chain.steps):
        value = (OPS[op](value, b) + (offset if i == index else 0)) % 100
        parts.append(format_step(op, b, value))
    return "".join(parts) + format_answer(value)


def chain_of(prompt: str) -> Chain:
    """The chain of an arith prompt such as "09+6*8*2?"."""
    body = prompt.rstrip("?")
    return Chain(int(body[:2]), tuple((body[i], int(body[i + 1])) for i in range(2, len(body), 2)))


def exact_policy(wrong_rows: dict[int, int], successes=None, policy=ScriptedPolicy):
    """A `policy` (ScriptedPolicy or a subclass) whose draw `i` of each prompt is right, or wrong at step
    `wrong_rows[i]` (0-based). A continuation of a right prefix finishes right, of a wrong one stays wrong; with
    `successes(j)`, a continuation of a right prefix of `j` steps finishes right on only that many of every 4 calls
    (values j/4 exactly). For the samplers that value states by continuations (vine, SPO-chain)."""
    draws, calls = Counter(), Counter()

    def draw(prompt):
        draws[prompt] += 1
        index = (draws[prompt] - 1) % 4
        chain = chain_of(prompt)
        return wrong_at(chain, wrong_rows[index]) if index in wrong_rows else solution(chain)

    def continue_(prompt, after):
        chain = chain_of(prompt)
        right = solution(chain)
        if right.startswith(after):
            steps = after.count("</thought>")
            calls[(prompt, after)] += 1
            ok = successes is None or (calls[(prompt, after)] - 1) % 4 < successes(steps)
            return right[len(after):] if ok else wrong_at(chain, 2)[len(after):] if steps < 3 else "\\boxed{0}"
        for index in wrong_rows.values():
            wrong = wrong_at(chain, index)
            if wrong.startswith(after):
                return wrong[len(after):]
        raise AssertionError(f"unexpected prefix {after!r}")

    return policy(draw, continue_)
