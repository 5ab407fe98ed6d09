"""Unbiased pass@k (Chen et al. 2021, arXiv 2107.03374).

From `n >= k` samples of which `c` are correct, pass@k is `1 - C(n-c, k) / C(n, k)`, computed as the product
`prod_{i=n-c+1}^{n} (1 - k/i)`, which never forms a large binomial. A leaf module: evaluation
(`credo.evaluate`) and the reset sampler (`credo.rollout.samplers.resets`) both use it.
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of a problem with `c` correct out of `n` samples (`k <= n`).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(5, 0, 2)
    (0.25, 1.0, 0.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product
