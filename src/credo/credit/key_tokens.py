"""KTAE: key-token advantages (arXiv 2505.16826, "KTAE: A Model-Free Algorithm to Key-Tokens Advantage Estimation
in Mathematical Reasoning"; public code github.com/xiaolizh1/KTAE, `verl/workers/actor/compute_key_tokens.py` and
`compute_ktae_outcome_advantage_and_keytokens` in `verl/trainer/ppo/core_algos.py`).

KTAE adds to GRPO's rollout advantage a per-token "key-token value": how strongly, within the token's group, the
token's presence goes with a correct outcome. For each group with correct and failed responses and each token id
`v` in it, a 2x2 table counts responses (presence, not occurrences):

    a = correct responses containing v    c = correct responses without v     (a + c = n_T)
    b = failed responses containing v     d = failed responses without v      (b + d = n_F)

and three statistics of it combine into the value `KT(v)` added to every trained occurrence of `v`:

    F(v)  = exp(-2 p),  p Fisher's exact two-sided p-value of the table; F = 0 where p = 1
    IG(v) = H(Y) - H(Y | v present), in bits, Y the outcome
    D(v)  = asin sqrt(a / n_T) - asin sqrt(b / n_F) + t_T / (t_F + 1e-5) - t_F / (t_T + 1e-5)
    KT(v) = h (2 sigmoid((alpha F + beta IG) D / (alpha + beta)) - 1)
          = h tanh((alpha F + beta IG) D / (2 (alpha + beta)))
    A_t   = A_i + KT(o_t)        on the trained tokens of response i, A_i GRPO's group advantage

`F` and `IG` say how strong the association is, `D` its direction: the difference of the presence rates on the
arcsine scale (half Cohen's h) plus a term-frequency contrast, where `t_c = s (k1 + 1) / (s + k1 (1 - b + b L_c /
mean L))` is the BM25-saturated share `s = f_c / L_c` of the token among the `L_c` tokens of class `c`'s responses
(`f_c` its occurrences there; `k1 = 2`, `b = 0.5`, `mean L = (L_T + L_F) / 2`). `KT` lies in `(-h, h)`: positive
for tokens that go with success, negative for tokens that go with failure, exactly 0 for a token every response
contains (its table is the only one its margins allow: `p = 1` and `IG = 0`), and so for every token of a group
whose responses all succeed or all fail (GRPO's advantage is 0 there too).

Settings. The public code's advantage function hard-codes `alpha = beta = 1`, the term-frequency term on and
`h = 1` (`ComputeKeyTokens(alpha=1.0, beta_ig=1.0, gamma_tf=1.0, top=1.0, ...)`; its launch scripts' `beta_ig=2.0`
never reaches it), credo's defaults. Its GRPO+KTAE scripts use verl's PPO clip 0.2, 16 responses per prompt and
GRPO's sample std (`std_ddof=1`, the verl conventions); `bottom=-1.0` is never read.

credo's reading, where the paper and code leave room:
- The key-token value is added to every trained occurrence whatever its row's outcome, as in the public code:
  it is the token's own association with success in the group, kept apart from the rollout's advantage. So a
  token's credit changes sign where `|KT|` outweighs its row's `|A_i|` against it: a failure's token that the
  group's successes share more than its failures is pushed up (the failure is not its doing), a success's token
  typical of the failures is pushed down. `h = 1` is about one group std; `key_scale = 0` is GRPO.
- "p = 1" is decided exactly: `F = 0` where the observed table is the most probable one its margins allow (then
  every table counts in the p-value). The public code tests `p != 1.0` on a float32 sum, which is exact where
  the margins allow one table (a token every response has) but mostly misses 1.0 on the other modal tables and
  gives them `F = exp(-2 p) ~ e^-2`: of the 268 modal tables a group of 16 can have, 22 sum to 1.0 exactly (15
  of them single tables). credo computes the rule as written; `tests/credit/test_key_tokens.py` checks that
  every difference from the public code is such a table or a float32 tie. p-values count the tables no more
  probable than the observed one up to a relative 1e-7, as scipy does (the public code compares float32 values
  exactly, so a tie may fall either way).
- Correct and failed rows are credo's verdicts (`failed_rows`: `correct` where given, else reward < 1); the
  public code calls a reward > 0 correct (the same on 0/1 rewards). Presence counts the response's tokens
  (`response_mask`); the value is added on the trained ones (`loss_mask`).
- No token id is special: the public code zeroes id 151643 (Qwen2.5's `<|endoftext|>`, its pad and end
  token); credo leaves padding to the mask, and an end token every response has carries no value anyway.
  A class whose responses hold no tokens has term frequency 0 (the public code divides by zero there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from credo.batch import RolloutBatch
from credo.checks import check_range
from credo.credit.base import Metrics
from credo.credit.groups import GroupAdvantage, failed_rows

BM25_K1 = 2.0
"""Term-frequency saturation of the direction's term-frequency contrast (the public code's `k1`)."""
BM25_B = 0.5
"""Length normalisation of the same (the public code's `b`)."""
TF_EPS = 1e-5
"""Added to the denominators of `t_T / t_F - t_F / t_T` (the public code's): a token of one class only gets a
large direction, so its value saturates at `+-h` wherever its table carries any association."""
TIE_RTOL = 1e-7
"""Tables whose probability is within this relative margin of the observed one count in the p-value (scipy's)."""


def fisher_exact(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """Fisher's exact two-sided test of the 2x2 tables `[[a, c], [b, d]]` (counts, any shape), vectorised.

    Returns `(p, modal)`: the p-value, the summed hypergeometric probability of every table with the observed
    margins that is no more probable than the observed one, in float64; and whether the observed table is a
    most probable one (then `p = 1`).

    >>> p, modal = fisher_exact(*torch.tensor([[3.0, 0.0, 0.0, 3.0], [1.0, 1.0, 2.0, 2.0]]).T)
    >>> [round(x, 4) for x in p.tolist()], modal.tolist()
    ([0.1, 1.0], [False, True])
    """
    a, b, c, d = (x.to(torch.float64) for x in (a, b, c, d))
    present, n_true = a + b, a + c
    n = present + c + d
    k = torch.arange(int(n_true.max()) + 1 if n_true.numel() else 1, dtype=torch.float64, device=a.device)
    low = (present + n_true - n).clamp(min=0).unsqueeze(-1)
    high = torch.minimum(present, n_true).unsqueeze(-1)
    support = (k >= low) & (k <= high)  # (..., K): the tables with the observed margins

    def log_pmf(x: Tensor) -> Tensor:
        n_, n_true_, present_ = n.unsqueeze(-1), n_true.unsqueeze(-1), present.unsqueeze(-1)
        return (_log_choose(n_true_, x) + _log_choose(n_ - n_true_, present_ - x) - _log_choose(n_, present_))

    log_p = torch.where(support, log_pmf(torch.where(support, k, low)), -torch.inf)
    counted = support & (log_p <= log_pmf(a.unsqueeze(-1)) + TIE_RTOL)
    p = torch.where(counted, log_p.exp(), 0.0).sum(-1).clamp(max=1.0)
    return p, (counted == support).all(-1)


def _log_choose(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def _binary_entropy(q: Tensor) -> Tensor:
    """H(q) in bits, 0 at q in {0, 1}."""
    terms = torch.stack([q, 1 - q])
    return -torch.where(terms > 0, terms * torch.log2(terms.clamp(min=1e-300)), 0.0).sum(0)


def _ratio(x: Tensor, y: Tensor) -> Tensor:
    """x / y, 0 where y = 0."""
    return torch.where(y > 0, x / torch.where(y > 0, y, 1.0), 0.0)


def key_token_values(
    response_ids: Tensor,
    response_mask: Tensor,
    group_id: Tensor,
    correct: Tensor,
    *,
    fisher_weight: float = 1.0,
    ig_weight: float = 1.0,
    term_frequency: bool = True,
    key_scale: float = 1.0,
) -> Tensor:
    """(B, T) float64 `KT` of each response token within its group (module docstring); 0 off `response_mask` and
    in groups without both a correct and a failed response. `correct` (B,) bool.

    Token 7 is in both correct responses and no failure: a key token; token 5 is everywhere: no value.

    >>> ids = torch.tensor([[5, 7], [5, 7], [5, 9], [5, 9]])
    >>> kt = key_token_values(ids, torch.ones(4, 2, dtype=torch.bool), torch.zeros(4, dtype=torch.long),
    ...                       torch.tensor([True, True, False, False]))
    >>> [round(x, 4) for x in kt[0].tolist()], [round(x, 4) for x in kt[2].tolist()]
    ([0.0, 1.0], [0.0, -1.0])
    """
    B, T = response_ids.shape
    device = response_ids.device
    out = torch.zeros(B, T, dtype=torch.float64, device=device)
    if not bool(response_mask.any()):
        return out
    _, group = torch.unique(group_id, return_inverse=True)  # (B,) 0 .. G-1
    rows = torch.arange(B, device=device).unsqueeze(1).expand(B, T)[response_mask]  # (N,) each token's row
    ids = response_ids[response_mask]
    span = int(ids.max() - ids.min()) + 1
    _, u = torch.unique(group[rows] * span + (ids - ids.min()), return_inverse=True)  # (N,) its (group, id)
    U = int(u.max()) + 1
    cls = correct.long()  # 0 failed, 1 correct
    ones = torch.ones(rows.numel(), dtype=torch.float64, device=device)
    occurrences = torch.zeros(U, 2, dtype=torch.float64, device=device).index_put_((u, cls[rows]), ones,
                                                                                   accumulate=True)
    pairs = torch.unique(rows * U + u)  # each (row, token id) once: presence
    pair_rows, pair_u = pairs // U, pairs % U
    present = torch.zeros(U, 2, dtype=torch.float64, device=device).index_put_(
        (pair_u, cls[pair_rows]), torch.ones(pairs.numel(), dtype=torch.float64, device=device), accumulate=True)
    G = int(group.max()) + 1
    sizes = torch.zeros(G, 2, dtype=torch.float64, device=device).index_put_(
        (group, cls), torch.ones(B, dtype=torch.float64, device=device), accumulate=True)
    tokens = torch.zeros(G, 2, dtype=torch.float64, device=device).index_put_((group[rows], cls[rows]), ones,
                                                                              accumulate=True)
    u_group = torch.zeros(U, dtype=torch.long, device=device).scatter_(0, u, group[rows])
    counts = torch.cat([present.flip(1), sizes[u_group].flip(1)], dim=1).long()  # (U, 4): a, b, n_T, n_F
    base = int(sizes.max()) + 1
    tables, which = torch.unique(((counts[:, 0] * base + counts[:, 1]) * base + counts[:, 2]) * base + counts[:, 3],
                                 return_inverse=True)  # the distinct tables: few, however many tokens
    digits = torch.stack([tables // base**3, tables // base**2 % base, tables // base % base, tables % base])
    strength, presence = _table_statistics(*digits.to(torch.float64), fisher_weight, ig_weight)
    strength, direction = strength[which], presence[which]
    if term_frequency:
        length = tokens[u_group]  # (U, 2): L_F, L_T of the token's group
        share = _ratio(occurrences, length)
        saturation = BM25_K1 * (1 - BM25_B + BM25_B * length / length.mean(dim=1, keepdim=True))
        tf_false, tf_true = (share * (BM25_K1 + 1) / (share + saturation)).unbind(1)
        direction = direction + tf_true / (tf_false + TF_EPS) - tf_false / (tf_true + TF_EPS)
    z = strength * direction / (fisher_weight + ig_weight)  # 0 in a group of one outcome: F = IG = 0 there
    out[response_mask] = (key_scale * torch.tanh(z / 2))[u]
    return out


def _table_statistics(a: Tensor, b: Tensor, n_true: Tensor, n_false: Tensor, fisher_weight: float,
                      ig_weight: float) -> tuple[Tensor, Tensor]:
    """`(alpha F + beta IG, asin sqrt(a / n_T) - asin sqrt(b / n_F))` of presence tables (module docstring)."""
    p, modal = fisher_exact(a, b, n_true - a, n_false - b)
    strength = fisher_weight * torch.where(modal, 0.0, torch.exp(-2 * p))
    if ig_weight:
        n = n_true + n_false
        conditional = (_ratio(a + b, n) * _binary_entropy(_ratio(a, a + b))
                       + _ratio(n - a - b, n) * _binary_entropy(_ratio(n_true - a, n - a - b)))
        strength = strength + ig_weight * (_binary_entropy(_ratio(n_true, n)) - conditional)
    return strength, torch.asin(_ratio(a, n_true).sqrt()) - torch.asin(_ratio(b, n_false).sqrt())


@dataclass(frozen=True, kw_only=True)
class KeyTokenAdvantage(GroupAdvantage):
    """KTAE's estimator: GRPO's group advantage on each trained token plus the token's key-token value within its
    group (`key_token_values`; module docstring)."""

    reads_token_ids: ClassVar[bool] = True
    """Its statistic is over the sampled token ids (verl's advantage estimator, passed none, refuses it)."""
    fisher_weight: float = 1.0
    """alpha >= 0: weight of Fisher's association `exp(-2 p)` (the public code's `alpha`)."""
    ig_weight: float = 1.0
    """beta >= 0: weight of the information gain in bits (the public code's `beta_ig`); alpha + beta > 0."""
    term_frequency: bool = True
    """Add the BM25 term-frequency contrast to the direction (the public code's `gamma_tf`, used as a switch)."""
    key_scale: float = 1.0
    """h >= 0: key-token values lie in (-h, h) (the public code's `top`); 0 is GRPO."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("KeyTokenAdvantage", "fisher_weight", self.fisher_weight, 0.0)
        check_range("KeyTokenAdvantage", "ig_weight", self.ig_weight, 0.0)
        check_range("KeyTokenAdvantage", "key_scale", self.key_scale, 0.0)
        if self.fisher_weight + self.ig_weight <= 0:
            raise ValueError("KeyTokenAdvantage: fisher_weight + ig_weight must be > 0 (they are averaged)")

    def __call__(self, batch: RolloutBatch) -> tuple[RolloutBatch, Metrics]:
        credited, metrics = super().__call__(batch)
        values = key_token_values(
            batch.response_ids, batch.response_mask, batch.group_id, ~failed_rows(batch),
            fisher_weight=self.fisher_weight, ig_weight=self.ig_weight, term_frequency=self.term_frequency,
            key_scale=self.key_scale,
        ).to(credited.advantages.dtype)
        trained = credited.loss_mask
        advantages = credited.advantages + torch.where(trained, values, 0.0)
        flipped = (advantages * credited.advantages < 0)[trained]
        metrics["credit/key_token_abs_mean"] = float(values[trained].abs().mean()) if trained.any() else 0.0
        metrics["credit/key_token_sign_flips"] = float(flipped.float().mean()) if trained.any() else 0.0
        return credited.replace(advantages=advantages), metrics
