"""Slow, obviously correct references: Python loops over rows and tokens, built from scalar torch ops so
that autograd gives their gradients too. The fast implementations in credo are checked against these."""

from __future__ import annotations

import math

import torch


def aggregate_loop(token_losses, mask, mode, norm_len=None, empty_rows="skip"):
    """token_losses: nested list [b][t] of scalars; mask: (B, T) bool."""
    B, T = mask.shape
    rows = []
    total, count = 0.0, 0
    for b in range(B):
        terms = [token_losses[b][t] for t in range(T) if mask[b, t]]
        total = total + sum(terms)
        count += len(terms)
        if not terms:
            rows.append(None)
        elif mode == "seq_mean_token_mean":
            rows.append(sum(terms) / len(terms))
        else:
            rows.append(sum(terms) / (norm_len or T))
    if mode == "token_mean":
        return total / max(count, 1)
    kept = [x for x in rows if x is not None]
    denominator = len(kept) if empty_rows == "skip" else B
    return sum(kept) / max(denominator, 1) if kept else torch.zeros(())


def clipped_token_loss(log_rho, adv, clip_low, clip_high, dual_clip=None, clamp=20.0, own=None):
    """One token of the PPO surrogate, max(-A r, -A clip(r)), with verl's dual clip for A < 0. With
    `own = (d, H)` the token's own ratio exp(d) is clipped too: max(..., -A H clip(exp(d)))."""
    if clamp is not None:
        log_rho = torch.clamp(log_rho, -clamp, clamp)
    r = torch.exp(log_rho)
    loss = torch.maximum(-adv * r, -adv * torch.clamp(r, 1 - clip_low, 1 + clip_high))
    if own is not None:
        d, history = own
        loss = torch.maximum(loss, -adv * history * torch.clamp(torch.exp(d), 1 - clip_low, 1 + clip_high))
    if dual_clip is not None and adv < 0:
        loss = torch.minimum(loss, -adv * dual_clip)
    return loss


def kl_k3(logp, ref):
    return torch.exp(ref - logp) - (ref - logp) - 1


def reference_loss(kind, logp, batch, loss, trace_mask=None):
    """The loss of `kind` ("clip", "reinforce", "gspo", "trace", "lambda") by loops over rows and tokens."""
    B, T = logp.shape
    mask, adv, old = batch.loss_mask, batch.advantages, batch.old_logp
    lengths = batch.lengths.tolist()
    token = [[None] * T for _ in range(B)]
    for b in range(B):
        n = lengths[b]
        d = [logp[b, t] - old[b, t] for t in range(T)]
        if kind == "gspo":
            seq = sum(d[t] for t in range(n) if batch.response_mask[b, t]) / max(n, 1)
        for t in range(T):
            if not mask[b, t]:
                token[b][t] = torch.zeros((), dtype=logp.dtype)
                continue
            a = adv[b, t]
            weight = 1.0
            if kind == "reinforce":
                value = -a * logp[b, t]
            elif kind == "clip":
                value = clipped_token_loss(d[t], a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp)
            elif kind == "gspo":
                log_s = seq.detach() + logp[b, t] - logp[b, t].detach()
                value = clipped_token_loss(log_s, a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp)
            elif kind == "trace":
                m = trace_mask if trace_mask is not None else batch.response_mask
                counted = batch.response_mask if loss.trace_norm == "response" else m
                num = d[t].detach()
                den = 1.0
                for k in range(t):
                    if m[b, k]:
                        num = num + loss.decay ** (t - k) * d[k].detach()
                    if counted[b, k]:
                        den = den + loss.decay ** (t - k)
                z = num / den if loss.normalize else num
                history = z - d[t].detach()
                if loss.clip != "combined":
                    bound = math.log(loss.history_cap)
                    history = torch.clamp(history, -bound, bound)
                if loss.clip == "current":
                    weight = torch.exp(history)
                    value = clipped_token_loss(d[t], a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp)
                else:
                    own = (d[t], torch.exp(history)) if loss.clip == "both" else None
                    value = clipped_token_loss(
                        history + d[t], a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp, own=own
                    )
            elif kind == "lambda":
                decay = loss.gamma * loss.lam
                if loss.lam_length is not None:
                    decay = decay ** (loss.lam_length / max(n, 1))
                w = lambda_weights_loop(n, decay, loss.style, loss.weight_floor)
                if loss.apply == "trace":
                    log_rho = d[t] + sum((w[k] * d[k] for k in range(t) if mask[b, k]), torch.zeros((), dtype=logp.dtype))
                    value = clipped_token_loss(log_rho, a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp)
                else:
                    def u(k):
                        return 1 + torch.sigmoid(logp[b, k] - 1)
                    e = u(t) + sum((w[k] * u(k) for k in range(t) if mask[b, k]), torch.zeros((), dtype=logp.dtype))
                    weight = e.detach() if loss.detach_weight else e
                    value = clipped_token_loss(d[t], a, loss.clip_low, loss.clip_high, loss.dual_clip, loss.log_ratio_clamp)
            else:
                raise ValueError(kind)
            value = value * weight
            if loss.kl_beta:
                value = value + loss.kl_beta * kl_k3(logp[b, t], batch.ref_logp[b, t])
            token[b][t] = value
    return aggregate_loop(token, mask, loss.agg, loss.norm_len, loss.empty_rows)


def lambda_weights_loop(n, d, style, floor):
    """GRPO-lambda's positional weights for a row of n tokens (docs/methods.md sec. 2)."""
    out = []
    for k in range(n):
        if style == "recent":
            w = d ** (n - 1 - k)
        elif style == "early":
            w = d**k
        else:
            w = max(d ** (n - k), d**k)
        out.append(max(w, floor))
    return out


def decayed_sum_loop(x, lam):
    """y_t = sum_{k<=t} lam^(t-k) x_k, one row at a time."""
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        acc = 0.0
        for t in range(x.shape[1]):
            acc = lam * acc + float(x[b, t])
            out[b, t] = acc
    return out


def lower_quantile(values, q):
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def loop_group_advantage(rewards: list[float], groups: list[int], eps: float = 1e-6) -> list[float]:
    """credo's default: (r - mean) / (population std + eps), exactly 0 for a group of equal rewards."""
    out = []
    for i in range(len(rewards)):
        members = [rewards[j] for j in range(len(rewards)) if groups[j] == groups[i]]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / len(members))
        out.append(0.0 if max(members) == min(members) else (rewards[i] - mean) / (std + eps))
    return out


def loop_step_advantages(batch) -> torch.Tensor:
    """Vine's step advantages token by token: the value where the next step starts (the reward after the last
    step) minus the value where this token's step starts."""
    out = torch.zeros(batch.response_ids.shape, dtype=batch.step_values.dtype)
    for b in range(batch.size):
        n = int(batch.response_mask[b].sum())
        segments = batch.segment_ids[b, :n].tolist()
        start_value = {}
        for t, s in enumerate(segments):
            start_value.setdefault(s, float(batch.step_values[b, t]))
        for t, s in enumerate(segments):
            later = [u for u in start_value if u > s]
            after = start_value[min(later)] if later else float(batch.rewards[b])
            out[b, t] = after - start_value[s]
    return out


def exact_fisher_association(a: int, b: int, c: int, d: int) -> float:
    """KTAE's Fisher term `exp(-2 p)` of the table [[a, c], [b, d]], 0 where the exact two-sided p-value is 1:
    hypergeometric probabilities as exact fractions, so ties and p = 1 are decided exactly."""
    from fractions import Fraction

    present, n_true, n = a + b, a + c, a + b + c + d
    pmf = {k: Fraction(math.comb(n_true, k) * math.comb(n - n_true, present - k), math.comb(n, present))
           for k in range(max(0, present + n_true - n), min(present, n_true) + 1)}
    p = sum(q for q in pmf.values() if q <= pmf[a])
    return 0.0 if p == 1 else math.exp(-2 * float(p))


def loop_key_token_values(batch, correct, *, fisher_weight=1.0, ig_weight=1.0, term_frequency=True, key_scale=1.0,
                          association=exact_fisher_association) -> torch.Tensor:
    """KTAE's key-token value of every response token (credo.credit.key_tokens), group by group, token id by token
    id, row by row: the presence table, Fisher (`association(a, b, c, d)`), information gain in bits, the
    arcsine and BM25 term-frequency direction, `h tanh(z / 2)`. `correct`: a list of bools per row."""

    def entropy(q):
        return -sum(x * math.log2(x) for x in (q, 1 - q) if x > 0)

    out = torch.zeros(batch.response_ids.shape, dtype=torch.float64)
    groups = {}
    for row in range(batch.size):
        groups.setdefault(int(batch.group_id[row]), []).append(row)
    for rows in groups.values():
        tokens = {row: [int(batch.response_ids[row, t]) for t in range(batch.width) if batch.response_mask[row, t]]
                  for row in rows}
        n_true = sum(correct[row] for row in rows)
        n_false = len(rows) - n_true
        if n_true == 0 or n_false == 0:
            continue
        length = {cls: sum(len(tokens[row]) for row in rows if correct[row] == cls) for cls in (True, False)}
        mean_length = (length[True] + length[False]) / 2
        value = {}
        for v in {v for row in rows for v in tokens[row]}:
            a = sum(1 for row in rows if correct[row] and v in tokens[row])
            b = sum(1 for row in rows if not correct[row] and v in tokens[row])
            n, present = n_true + n_false, a + b
            ig = entropy(n_true / n) - (present / n * entropy(a / present)
                                        + ((n - present) / n * entropy((n_true - a) / (n - present)) if n > present else 0))
            direction = math.asin(math.sqrt(a / n_true)) - math.asin(math.sqrt(b / n_false))
            if term_frequency:
                tf = {}
                for cls in (True, False):
                    f = sum(tokens[row].count(v) for row in rows if correct[row] == cls)
                    share = f / length[cls] if length[cls] else 0.0
                    tf[cls] = share * 3.0 / (share + 2.0 * (0.5 + 0.5 * length[cls] / mean_length))  # k1 2, b 0.5
                direction += tf[True] / (tf[False] + 1e-5) - tf[False] / (tf[True] + 1e-5)
            strength = fisher_weight * association(a, b, n_true - a, n_false - b) + ig_weight * ig
            value[v] = key_scale * math.tanh(strength * direction / (fisher_weight + ig_weight) / 2)
        for row in rows:
            for t in range(batch.width):
                if batch.response_mask[row, t]:
                    out[row, t] = value[int(batch.response_ids[row, t])]
    return out
