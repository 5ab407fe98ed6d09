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
