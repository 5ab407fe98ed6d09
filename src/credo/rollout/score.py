"""Teacher forcing: the policy's log-probs of given continuations after given contexts, for samplers that score text
they did not sample (IGPO's gold answer after each turn of an episode, `credo.rollout.samplers.info_gain`).

A continuation `y` after a context `x` gets `log pi(y_j | x, y_<j)` for each of its tokens, at temperature 1, from
one decoder pass over `x + y` (right-padded rows, in batches); only the positions that predict `y` go through the LM
head (`credo.logprobs.token_logprobs`).
"""

from __future__ import annotations

import torch

from credo.logprobs import token_logprobs
from credo.rollout.padding import right_pad


@torch.no_grad()
def score_continuations(model, contexts: list[list[int]], continuations: list[list[int]], *, pad: int,
                        batch_size: int) -> list[list[float]]:
    """Each continuation's token log-probs under `model` after its context (a context holds at least one token)."""
    if len(contexts) != len(continuations):
        raise ValueError(f"one continuation per context: {len(continuations)} for {len(contexts)} contexts")
    if any(not context for context in contexts):
        raise ValueError("a scored continuation needs a context of at least one token (its prompt)")
    device = next(model.parameters()).device
    head = model.get_output_embeddings()
    out: list[list[float]] = []
    for start in range(0, len(contexts), batch_size):
        chunk = list(zip(contexts[start:start + batch_size], continuations[start:start + batch_size], strict=True))
        ids, mask = right_pad([x + y for x, y in chunk], pad)
        rows, positions, targets = [], [], []
        for i, (x, y) in enumerate(chunk):
            rows += [i] * len(y)
            positions += range(len(x) - 1, len(x) + len(y) - 1)  # the position before each continuation token
            targets += y
        hidden = model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.long().to(device)).last_hidden_state
        picked = hidden[torch.tensor(rows, dtype=torch.long, device=device),
                        torch.tensor(positions, dtype=torch.long, device=device)]  # (N, H)
        logp, _ = token_logprobs(picked, head.weight, torch.tensor(targets, dtype=torch.long, device=device),
                                 bias=head.bias)
        values, at = logp.float().cpu().tolist(), 0
        for _, y in chunk:
            out.append(values[at:at + len(y)])
            at += len(y)
    return out
