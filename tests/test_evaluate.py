"""Evaluation metrics: the unbiased pass@k estimator, per-difficulty summaries, eval subsets."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations

import pytest

from credo.config import EvalConfig
from credo.evaluate import eval_subset, evaluate_policy, summarise
from credo.passk import pass_at_k
from credo.rollout.generate import Completions
from credo.tasks.base import Problem, Task, Verdict


def test_pass_at_k_matches_the_binomial_definition():
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)  # comb(m, k) = 0 when m < k
                assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-12), (n, c, k)


def test_pass_at_k_matches_subset_enumeration():
    """pass@k is the share of the k-subsets of the n samples that hold at least one correct sample."""
    for n in range(1, 9):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(range(n), k))
                hits = sum(any(samples[i] for i in subset) for subset in subsets)
                assert pass_at_k(n, c, k) == pytest.approx(float(Fraction(hits, len(subsets))), abs=1e-12)


def test_pass_at_k_hand_values():
    # n=4, c=1, k=1: 1/4. n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2. n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 0.7
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(5, 1, 5) == 1.0
    # large n stays finite and exact enough: n=1000, c=1, k=1 -> 1/1000
    assert pass_at_k(1000, 1, 1) == pytest.approx(1e-3, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4), (0, 0, 1), (2, 1, -1)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError, match=rf"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}"):
        pass_at_k(n, c, k)


def test_summarise_two_buckets():
    """Four problems, n = 4 samples each; buckets a (3 problems) and b (1).

    problem  bucket greedy  c   pass@1=c/4  pass@2 = 1 - C(4-c,2)/6   pass@4
    0        a      1       2   0.5         1 - 1/6 = 5/6             1
    1        a      0       0   0           1 - 6/6 = 0               0
    2        a      1       4   1           1                         1
    3        b      0       1   0.25        1 - 3/6 = 1/2             1
    overall = mean over the 4 problems (not over the 2 buckets):
      greedy 2/4 = 0.5; pass@1 = avg@4 = 1.75/4 = 0.4375; pass@2 = (5/6 + 0 + 1 + 1/2)/4 = 7/12; pass@4 3/4
      (a mean over buckets would give pass@1 = (0.5 + 0.25)/2 = 0.375 instead)
    a: greedy 2/3; pass@1 = avg@4 = 1.5/3 = 0.5; pass@2 = (5/6 + 1)/3 = 11/18; pass@4 2/3
    b: greedy 0; pass@1 = avg@4 = 0.25; pass@2 0.5; pass@4 1
    """
    samples = [[True, True, False, False], [False] * 4, [True] * 4, [False, True, False, False]]
    result = summarise(["a", "a", "a", "b"], [True, False, True, False], samples, ks=[1, 2, 4])
    expected_overall = {"greedy_pass@1": 0.5, "pass@1": 0.4375, "pass@2": 7 / 12, "pass@4": 0.75, "avg@4": 0.4375}
    assert set(result) == set(expected_overall) | {"by_difficulty"}
    for key, value in expected_overall.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
    expected_a = {
        "greedy_pass@1": 2 / 3, "pass@1": 0.5, "pass@2": 11 / 18, "pass@4": 2 / 3, "avg@4": 0.5, "problems": 3,
    }
    expected_b = {"greedy_pass@1": 0.0, "pass@1": 0.25, "pass@2": 0.5, "pass@4": 1.0, "avg@4": 0.25, "problems": 1}
    assert list(result["by_difficulty"]) == ["a", "b"]
    for bucket, expected in (("a", expected_a), ("b", expected_b)):
        got = result["by_difficulty"][bucket]
        assert set(got) == set(expected)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, abs=1e-12), (bucket, key)


def test_summarise_skips_k_above_n_and_missing_parts():
    # n = 2 samples: pass@4 cannot be estimated and is left out; greedy None -> no greedy key
    result = summarise(["x", "x"], None, [[True, False], [False, False]], ks=[1, 4])
    # pass@1 = avg@2 = (1/2 + 0)/2 = 0.25
    assert set(result) == {"pass@1", "avg@2", "by_difficulty"}
    assert result["pass@1"] == pytest.approx(0.25) and result["avg@2"] == pytest.approx(0.25)
    assert result["by_difficulty"] == {"x": {"pass@1": 0.25, "avg@2": 0.25, "problems": 2}}
    # greedy only: sorted buckets, greedy 1/2 on "b" and 1 on "a"
    result = summarise(["b", "a", "b"], [True, True, False], None, ks=[1])
    assert result["greedy_pass@1"] == pytest.approx(2 / 3)  # (1 + 1 + 0)/3
    assert result["by_difficulty"] == {
        "a": {"greedy_pass@1": 1.0, "problems": 1},
        "b": {"greedy_pass@1": 0.5, "problems": 2},
    }
    assert list(result["by_difficulty"]) == ["a", "b"]


def test_eval_subset():
    problems = [Problem(f"p{i}", "0", d) for i, d in enumerate("aabbbaca")]
    # first two of each bucket, in the original order: a -> p0, p1; b -> p2, p3; c -> p6
    assert [p.prompt for p in eval_subset(problems, 2)] == ["p0", "p1", "p2", "p3", "p6"]
    assert [p.prompt for p in eval_subset(problems, 1)] == ["p0", "p2", "p6"]
    assert eval_subset(problems, 100) == problems
    subset = eval_subset(problems, None)
    assert subset == problems and subset is not problems


# ------------------------------------------------------------------------------------------ verifier errors


class Tokenizer:
    chat_template = None

    def __call__(self, messages, add_special_tokens=True):
        return {"input_ids": [[1] for _ in messages]}


def completions_of(texts: list[str]) -> Completions:
    """Generated responses with these texts (one token each: the evaluation reads only the texts)."""
    return Completions.from_lists([[0]] * len(texts), [[1]] * len(texts), texts, [False] * len(texts), pad=0)


class EchoBackend:
    """Answers each prompt with the prompt itself, `repeat` times."""

    tokenizer = Tokenizer()

    def __init__(self, problems):
        self.prompts = [p.prompt for p in problems]

    def generate(self, prompts, *, max_new_tokens, greedy=False, temperature=1.0, top_p=1.0, repeat=1):
        return completions_of([text for text in self.prompts for _ in range(repeat)])


class FlakyTask(Task):
    """Correct when the response is "right"; raises on "boom"."""

    name = "flaky"

    def verify(self, problem, response):
        if response == "boom":
            raise ValueError("flaky verifier")
        return Verdict(reward=float(response == "right"), correct=response == "right")


PROBLEMS = [Problem("right", "", "a"), Problem("boom", "", "a"), Problem("wrong", "", "b")]


def test_evaluation_follows_reward_errors_zero():
    """A verifier that raised used to crash the evaluation whatever `rollout.reward_errors` said."""
    config = EvalConfig(samples=2, ks=[1, 2])
    result = evaluate_policy(EchoBackend(PROBLEMS), FlakyTask(), PROBLEMS, config, max_new_tokens=4, seed=0,
                             reward_errors="zero")
    assert result["greedy_pass@1"] == pytest.approx(1 / 3) and result["pass@2"] == pytest.approx(1 / 3)
    assert result["by_difficulty"]["a"]["greedy_pass@1"] == 0.5  # the raising answer counts as wrong


def test_evaluation_follows_reward_errors_raise():
    with pytest.raises(RuntimeError, match=r"(?s)the flaky verifier raised ValueError: .*prompt: +'boom'"):
        evaluate_policy(EchoBackend(PROBLEMS), FlakyTask(), PROBLEMS, EvalConfig(samples=0, ks=[1]), max_new_tokens=4,
                        seed=0, reward_errors="raise")


@pytest.mark.parametrize("extra", [[], ["optim.minibatches=2"]], ids=["on-policy", "behaviour-pass"])
def test_training_evaluations_follow_reward_errors(tmp_path, monkeypatch, extra):
    from tiny import TINY, make_arith_verifier_flaky

    from credo.config import load_config
    from credo.train import train

    make_arith_verifier_flaky(monkeypatch)
    config = load_config(None, TINY + ["train.steps=2", "rollout.reward_errors=zero"] + extra)
    summary = train(config, tmp_path / "run", show_progress=False)
    assert summary["steps"] == 2 and {"greedy_pass@1", "pass@2"} <= set(summary["eval_start"])


class LookupBackend:
    """Greedy: every answer wrong; sampled: the prompt's own text (prompts encode to their index in `prompts`)."""

    def __init__(self, problems):
        self.texts = [p.prompt for p in problems]
        self.tokenizer = self  # it encodes prompts itself
        self.chat_template = None
        self.sampled = []
        self.top_ps = []

    def __call__(self, messages, add_special_tokens=True):
        return {"input_ids": [[self.texts.index(m)] for m in messages]}

    def generate(self, prompts, *, max_new_tokens, greedy=False, temperature=1.0, top_p=1.0, repeat=1):
        if not greedy:
            self.sampled += [self.texts[ids[0]] for ids in prompts]
            self.top_ps.append(top_p)
        return completions_of(["wrong" if greedy else self.texts[ids[0]] for ids in prompts for _ in range(repeat)])


def test_sample_problems_samples_the_first_of_each_bucket_and_averages_over_them():
    problems = [Problem("right", "", "a"), Problem("wrong", "", "a"), Problem("right ", "", "a"),
                Problem("wrong ", "", "b"), Problem("right  ", "", "b")]

    class Lookup(Task):
        name = "lookup"

        def verify(self, problem, response):
            return Verdict(reward=float(response.startswith("right")), correct=response.startswith("right"))

    backend = LookupBackend(problems)
    config = EvalConfig(samples=2, ks=[1, 2], sample_problems=1, top_p=0.95)
    result = evaluate_policy(backend, Lookup(), problems, config, max_new_tokens=4, seed=0)
    assert backend.sampled == ["right", "wrong "]  # the first problem of bucket a and of bucket b
    assert backend.top_ps == [0.95]  # the stated top-p reaches the sampler
    assert result["greedy_pass@1"] == 0.0  # greedy covers all five (every greedy answer wrong)
    assert result["pass@1"] == pytest.approx(0.5) and result["avg@2"] == pytest.approx(0.5)
    assert result["by_difficulty"]["a"]["pass@2"] == 1.0 and result["by_difficulty"]["b"]["pass@2"] == 0.0
    assert result["by_difficulty"]["a"]["problems"] == 3


class CutBackend:
    """Answers "long" prompts with 8 tokens cut off at the budget (greedy, and every other sample), others with 3
    tokens that end; every answer wrong."""

    tokenizer = Tokenizer()

    def __init__(self, problems):
        self.prompts = [p.prompt for p in problems]

    def generate(self, prompts, *, max_new_tokens, greedy=False, temperature=1.0, top_p=1.0, repeat=1):
        rows = [(prompt, k) for prompt in self.prompts[: len(prompts)] for k in range(repeat)]
        cut = [prompt.startswith("long") and (greedy or k % 2 == 0) for prompt, k in rows]
        lengths = [max_new_tokens if c else 3 for c in cut]
        return Completions.from_lists([[0]] * len(rows), [[1] * n for n in lengths], ["wrong"] * len(rows), cut,
                                      pad=0)


def test_evaluation_reports_response_lengths_and_truncated_shares_per_difficulty():
    """A budget too small for one difficulty's responses showed only as a fall in its accuracy: the long regime's
    12-step greedy pass@1 fell to 0.10 with nothing in the record to tell a cut-off answer from a wrong one."""
    problems = [Problem("long a", "", "long"), Problem("long b", "", "long"), Problem("short", "", "short")]
    config = EvalConfig(samples=2, ks=[1])
    result = evaluate_policy(CutBackend(problems), FlakyTask(), problems, config, max_new_tokens=8, seed=0)
    assert result["by_difficulty"]["long"] == {
        "greedy_pass@1": 0.0, "pass@1": 0.0, "avg@2": 0.0, "greedy_tokens": 8.0, "greedy_truncated": 1.0,
        "sampled_tokens": 5.5, "sampled_truncated": 0.5, "problems": 2}
    short = result["by_difficulty"]["short"]
    assert short["greedy_tokens"] == 3.0 and short["greedy_truncated"] == short["sampled_truncated"] == 0.0
    assert set(result) == {"greedy_pass@1", "pass@1", "avg@2", "by_difficulty"}  # lengths are per difficulty only
