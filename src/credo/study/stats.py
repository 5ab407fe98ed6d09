"""Inference over seeds: t-intervals, paired t-tests, Holm's correction, power, Fieller's interval for a share.

A study pairs its runs by seed, so a comparison of two methods is the list of their per-seed differences
`d_1 .. d_n` (mean `d`, sample standard deviation `s`, ddof 1). Everything here is a pure function of numbers;
Student-t quantiles and distribution functions come from `scipy.stats`.

- `mean_interval`: `d ± t_{0.975, n-1} s / sqrt(n)`, the two-sided 95% Student-t interval.
- `paired_p`: the two-sided p-value of the paired t-test of a zero mean, `t = d / (s / sqrt(n))`,
  `p = 2 P(T_{n-1} > |t|)`; `recovered` gets `(s, p)` back from a written interval (mean, low, high, n).
- `holm`: Holm's (1979) step-down adjustment of a family of m p-values: sorted `p_(1) <= ... <= p_(m)`,
  `p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`; rejecting where `p~ < alpha` keeps the family-wise error
  rate at most alpha, whatever the dependence between the tests.
- `detectable`: the minimum detectable effect of a two-sided paired t-test: the smallest true mean difference
  found with the given power at level alpha from n seeds of paired sd s, through the non-central t
  distribution (non-centrality `delta sqrt(n) / s`).
- `share_of_gain`: a method's share of the oracle's gain, the ratio of two paired means
  `rho = mean(method - base) / mean(oracle - base)`, with Fieller's (1954) interval: the set of ratios r
  whose paired t-test of `(method - base) - r (oracle - base)` does not reject at the interval's level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import integrate, optimize, stats

LEVEL = 0.95
"""The level of every interval of a report."""


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its 95% interval (`low`, `high` are None with fewer than two values)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    @property
    def half_width(self) -> float | None:
        """Half the width of the 95% interval (None without one)."""
        return None if self.low is None else (self.high - self.low) / 2

    def __str__(self) -> str:
        if self.low is None:
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ± {self.half_width:.3f}"


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided `level` quantile of Student's t with `df >= 1` degrees of freedom, `t_{(1 + level) / 2, df}`.

    >>> round(t_quantile(2), 4), round(t_quantile(10_000), 3)
    (4.3027, 1.96)
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return float(stats.t.ppf((1 + level) / 2, df))


def written_quantile(df: int) -> float:
    """The 95% quantile with which reports written before `t_quantile` used scipy drew their intervals: a hand-kept
    table of `t_{0.975, df}` to three decimals, which is `t_quantile` rounded for every df up to 20 (and at 25, 30,
    40, 60, 120); `recovered` undoes it exactly for such a report.

    >>> written_quantile(2), written_quantile(11)
    (4.303, 2.201)
    """
    return round(t_quantile(df), 3)


def half_width(sd: float, n: int) -> float:
    """Half the width of the 95% interval of a mean of `n` values of standard deviation `sd`: `t_{0.975, n-1} sd / sqrt(n)`."""
    return t_quantile(n - 1) * sd / math.sqrt(n)


def sample_sd(values: Sequence[float]) -> float:
    """The sample standard deviation (ddof 1) of at least two values."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_interval(values: Sequence[float]) -> Estimate:
    """Mean and 95% t-interval `mean ± t_{0.975, n-1} * sd / sqrt(n)` (sample sd, ddof 1).

    >>> str(mean_interval([1.0, 2.0, 3.0]))  # sd 1, t(2) = 4.303: 2 ± 4.303 / sqrt(3)
    '2.000 ± 2.484'
    """
    if not values:
        raise ValueError("mean_interval needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Estimate(mean, None, None, n)
    half = half_width(sample_sd(values), n)
    return Estimate(mean, mean - half, mean + half, n)


def paired_p(mean: float, sd: float, n: int) -> float:
    """Two-sided p-value of the paired t-test of a zero mean from n >= 2 differences of mean `mean` and sample sd
    `sd`: `2 P(T_{n-1} > |mean| sqrt(n) / sd)`; with `sd` 0 it is 1 for a zero mean (the same runs) and 0 otherwise.

    >>> round(paired_p(2.0, 1.0, 3), 4)  # t = 2 sqrt(3); df 2: p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(12 / 14)
    0.0742
    """
    if n < 2:
        raise ValueError(f"a paired t-test needs at least two seeds, got {n}")
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * stats.t.sf(abs(mean) * math.sqrt(n) / sd, n - 1))


def equivalence_p(mean: float, sd: float, n: int, margin: float) -> float:
    """p-value of the two one-sided t-tests (TOST; Schuirmann 1987) that a paired mean lies within `(-margin,
    margin)`: the larger of `P(T_{n-1} > (mean + margin) sqrt(n) / sd)` and `P(T_{n-1} > (margin - mean) sqrt(n) /
    sd)`; below the level, the difference is equivalent to 0 at that margin. With `sd` 0 it is 0 inside the margin and
    1 outside.

    >>> round(equivalence_p(0.0, 1.0, 4, 1.0), 4)  # t = 2 on 3 df both ways: P(T_3 > 2)
    0.0697
    >>> equivalence_p(0.5, 1.0, 4, 0.2) > 0.5  # a mean outside the margin is never equivalent
    True
    """
    if n < 2:
        raise ValueError(f"an equivalence test needs at least two seeds, got {n}")
    if sd == 0:
        return 0.0 if abs(mean) < margin else 1.0
    scale = sd / math.sqrt(n)
    return float(max(stats.t.sf((mean + margin) / scale, n - 1), stats.t.sf((margin - mean) / scale, n - 1)))


def recovered(estimate: Estimate, quantile: float) -> tuple[float, float]:
    """The paired sd and t-test p-value behind a written 95% t-interval `mean ± quantile sd / sqrt(n)` (`quantile`:
    the `t_{0.975, n-1}` it was drawn with): `sd = (high - low) / 2 sqrt(n) / quantile`, then `paired_p`.

    >>> sd, p = recovered(Estimate(2.0, 2.0 - 2.484, 2.0 + 2.484, 3), 4.303)
    >>> round(sd, 3), round(p, 3)
    (1.0, 0.074)
    """
    if estimate.low is None:
        raise ValueError("an estimate without an interval (one seed) has no p-value")
    sd = estimate.half_width * math.sqrt(estimate.n) / quantile
    return sd, paired_p(estimate.mean, sd, estimate.n)


def smallest_exact_p(n: int) -> float:
    """The smallest two-sided p an exact sign-flip (permutation) test of n paired differences can give: `2 / 2^n`
    (every difference on one side). Where it is not below Holm's first threshold `alpha / m`, no exact test at these
    seeds can pass the correction, whatever the data.

    >>> smallest_exact_p(8)  # 2 / 256: above 0.05 / 10
    0.0078125
    """
    return 2.0 / 2**n


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's (1979) adjusted p-values, in the given order: the i-th smallest p times `m - i + 1`, capped at 1, and
    never below an adjusted p of a smaller one (step-down). A test rejects at family-wise level alpha where its
    adjusted p is below alpha.

    >>> holm([0.01, 0.04, 0.03, 0.005])  # 4 x 0.005, 3 x 0.01, 2 x 0.03, max(1 x 0.04, 0.06)
    [0.03, 0.06, 0.06, 0.02]
    """
    m = len(ps)
    out = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[index]))
        out[index] = running
    return out


def detectable(sd: float, n: int, alpha: float, power: float = 0.8) -> float:
    """The minimum detectable effect of a two-sided paired t-test at level `alpha` with `n` seeds of paired sd `sd`:
    the mean difference `delta` at which `P(|T'| > c) = power`, `c = t_{1 - alpha/2, n-1}`, `T'` non-central t
    with `k = n - 1` degrees of freedom and non-centrality `lam = delta sqrt(n) / sd`.

    `T' = (Z + lam) / S` with `Z` standard normal and `S = sqrt(V / k)`, `V` chi-square(k), so the power is
    `E_S[Phi(lam - c S) + Phi(-lam - c S)]`, one quadrature over the density of S,
    `2 (k/2)^(k/2) / Gamma(k/2) s^(k-1) exp(-k s^2 / 2)` (scipy's `nct` returns NaN for few seeds at a large
    non-centrality, which a small alpha needs).

    >>> round(detectable(1.0, 1000, 0.05) * math.sqrt(1000), 2)  # the normal limit: z_0.975 + z_0.8 = 1.96 + 0.84
    2.8
    """
    if n < 2 or sd < 0:
        raise ValueError(f"a detectable effect needs at least two seeds and sd >= 0, got n = {n}, sd = {sd}")
    if sd == 0:
        return 0.0
    k = n - 1
    c = t_quantile(k, 1 - alpha)
    log_scale = math.log(2) + k / 2 * math.log(k / 2) - math.lgamma(k / 2)

    def rejects(lam: float, s: float) -> float:  # P(|Z + lam| > c s), weighted by the density of S at s
        density = math.exp(log_scale + (k - 1) * math.log(s) - k * s * s / 2) if s > 0 else math.exp(log_scale) * (k == 1)
        return density * (math.erfc((c * s - lam) / math.sqrt(2)) + math.erfc((c * s + lam) / math.sqrt(2))) / 2

    def shortfall(lam: float) -> float:
        found, _ = integrate.quad(lambda s: rejects(lam, s), 0, 1 + 40 / math.sqrt(2 * k), points=[1], limit=200,
                                  epsabs=1e-13, epsrel=1e-11)
        return found - power

    high = 2 * c + 2
    while shortfall(high) < 0:
        high *= 2
    return optimize.brentq(shortfall, 0.0, high, xtol=1e-10) * sd / math.sqrt(n)


@dataclass(frozen=True)
class Share:
    """Share of the oracle's gain a method recovers; `value` None when undefined (the oracle's mean gain is not
    positive), `low`/`high` None when there is no bounded interval (one seed, or an oracle gain not significantly
    above 0: Fieller's set is then unbounded)."""

    value: float | None
    low: float | None
    high: float | None
    seeds: int

    def __str__(self) -> str:
        if self.value is None:
            return "undefined (oracle no better than baseline)"
        if self.seeds < 2:
            return f"{self.value:.2f} (one seed)"
        interval = "unbounded" if self.low is None else f"{self.low:.2f} to {self.high:.2f}"
        return f"{self.value:.2f} [{interval}]"


def share_of_gain(method: Sequence[float], base: Sequence[float], oracle: Sequence[float]) -> Share:
    """`mean(method - base) / mean(oracle - base)` over paired seeds, with Fieller's 95% interval.

    `method[i]`, `base[i]`, `oracle[i]` are one seed's scores (e.g. areas). The share is 0 for a method no better
    than the base, 1 for one as good as the oracle, negative for one worse than the base; undefined (`value`
    None) when the oracle's mean gain is not positive. With `g_i` the method's gains, `o_i` the oracle's, means
    `a`, `b`, and `v_gg`, `v_oo`, `v_go` their (co)variances over seeds divided by n, r is in the interval when
    `(a - r b)^2 <= t^2 (v_gg - 2 r v_go + r^2 v_oo)` (`t = t_{0.975, n-1}`): the paired t-test of
    `g - r o` does not reject. That is `A r^2 - 2 B r + C <= 0` with `A = b^2 - t^2 v_oo`,
    `B = a b - t^2 v_go`, `C = a^2 - t^2 v_gg`: for `A > 0` (the oracle's gain significantly above 0) the
    interval `(B ± sqrt(B^2 - A C)) / A`, otherwise unbounded (`low`, `high` None).

    >>> str(share_of_gain([0.6, 0.7], [0.5, 0.6], [0.7, 0.8]))  # gains 0.1 of 0.2 on both seeds
    '0.50 [0.50 to 0.50]'
    """
    if not len(method) == len(base) == len(oracle) > 0:
        raise ValueError(f"share_of_gain needs paired seeds: got {len(method)}, {len(base)} and {len(oracle)} scores")
    gains = [m - b for m, b in zip(method, base)]
    oracle_gains = [o - b for o, b in zip(oracle, base)]
    n = len(gains)
    a, b = sum(gains) / n, sum(oracle_gains) / n
    if b <= 0:
        return Share(None, None, None, n)
    if n < 2:
        return Share(a / b, None, None, n)
    t2 = t_quantile(n - 1) ** 2

    def covariance(xs: list[float], ys: list[float]) -> float:  # of the means: over seeds, ddof 1, divided by n
        mx, my = sum(xs) / n, sum(ys) / n
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (n - 1) / n

    big_a = b * b - t2 * covariance(oracle_gains, oracle_gains)
    if big_a <= 0:
        return Share(a / b, None, None, n)
    big_b = a * b - t2 * covariance(gains, oracle_gains)
    big_c = a * a - t2 * covariance(gains, gains)
    root = math.sqrt(max(0.0, big_b * big_b - big_a * big_c))  # >= 0: r = a / b satisfies the inequality
    return Share(a / b, (big_b - root) / big_a, (big_b + root) / big_a, n)
