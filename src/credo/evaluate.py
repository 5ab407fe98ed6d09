"""Evaluation: greedy pass@1, pass@k from n samples (unbiased estimator), avg@k, per difficulty.

pass@k (Chen et al. 2021, arXiv 2107.03374) from `n >= k` samples of which `c` are correct:
`1 - C(n-c, k) / C(n, k)` (`credo.passk.pass_at_k`). avg@k is the mean accuracy over the samples. Results
are fractions in [0, 1], overall (the mean over problems) and under `by_difficulty`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from credo.passk import pass_at_k
from credo.tasks import verify_all


def summarise(
    difficulties: Sequence[str],
    greedy_correct: Sequence[bool] | None,
    sample_correct: Sequence[Sequence[bool]] | None,
    ks: Sequence[int],
) -> dict:
    """Overall and per-difficulty metrics from per-problem results.

    `greedy_correct[i]`: problem i's greedy answer was right; `sample_correct[i]`: its n sampled answers.
    Keys: `greedy_pass@1`, `pass@k` and `avg@n` (n = samples per problem), and `by_difficulty`.
    """
    per_problem: list[dict[str, float]] = [{} for _ in difficulties]
    for i in range(len(difficulties)):
        if greedy_correct is not None:
            per_problem[i]["greedy_pass@1"] = float(greedy_correct[i])
        if sample_correct is not None:
            outcomes = sample_correct[i]
            n, c = len(outcomes), sum(bool(x) for x in outcomes)
            for k in ks:
                if k <= n:
                    per_problem[i][f"pass@{k}"] = pass_at_k(n, c, k)
            per_problem[i][f"avg@{n}"] = c / n
    result = _mean(per_problem)
    buckets: dict[str, list[dict[str, float]]] = defaultdict(list)
    for difficulty, metrics in zip(difficulties, per_problem):
        buckets[difficulty].append(metrics)
    result["by_difficulty"] = {d: _mean(rows) | {"problems": len(rows)} for d, rows in sorted(buckets.items())}
    return result


def _mean(rows: list[dict[str, float]]) -> dict:
    keys = rows[0].keys() if rows else []
    return {key: sum(r[key] for r in rows) / len(rows) for key in keys}


def evaluate_policy(backend, task, problems, config, *, max_new_tokens: int, seed: int,
                    reward_errors: str = "raise") -> dict:
    """Greedy pass@1 and pass@k / avg@n from `config.samples` samples per problem, overall and per difficulty.

    Responses come from the run's generation backend (`credo.rollout.generate.TransformersBackend` or vLLM).
    Sampling runs under its own seed (the training RNG stream is left untouched), so evaluations of
    different runs and methods see the same sampling noise. A verifier that raises follows the run's
    `rollout.reward_errors`, as in training: "raise" stops with the prompt and response, "zero" counts the
    answer wrong (with a warning).
    """
    import torch

    from credo.rollout.generate import encode_prompts

    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    greedy = samples = None
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
        torch.manual_seed(seed)
        if config.greedy:
            out = backend.generate(prompts, max_new_tokens=max_new_tokens, greedy=True)
            greedy = [v.correct for v in verify_all(task, problems, out.texts, reward_errors)[0]]
        if config.samples:
            n = config.samples
            out = backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=config.temperature, repeat=n)
            rows = [p for p in problems for _ in range(n)]
            flat = [v.correct for v in verify_all(task, rows, out.texts, reward_errors)[0]]
            samples = [flat[i * n : (i + 1) * n] for i in range(len(problems))]
    return summarise([p.difficulty for p in problems], greedy, samples, config.ks)


def eval_subset(problems, max_problems: int | None):
    """The first `max_problems` problems of each difficulty bucket (all when None)."""
    if max_problems is None:
        return list(problems)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for p in problems:
        if seen[p.difficulty] < max_problems:
            out.append(p)
            seen[p.difficulty] += 1
    return out
