"""The verification rule on the device, for a draft that never left it (a draft model on a GPU).

The same rules as sampling.verify_greedy and sampling.verify_stochastic, written without a branch on a device value,
so the host queues the whole step and waits once, for the outcome: n accepted, the target's own next token and the
draft's tokens, read in one `.tolist()`. Each returns (n, next token, the draft's tokens as a list).

Speculative sampling without branches: the residual distribution is formed for every draft position at once
(K rows of the vocabulary, a few MB on a GPU), row n is picked on the device (p_{K+1} itself when all K passed), and
one token is drawn from it. Which row is picked, and what it holds, are exactly the host rule's: accept x_i with
probability min(1, p_i(x_i) / q_i(x_i)) up to the first rejection, then draw from norm(max(p_n - q_n, 0)) (p_n
when that has no mass; p_n without x_n for a point-mass draft), or from p_{K+1} after K acceptances.
"""

from __future__ import annotations

import torch

from .sampling import Sampler


def verify_greedy_on_device(target_logits: torch.Tensor, draft: torch.Tensor) -> tuple[int, int, list[int]]:
    """Greedy verification of `draft` (1-D, on the device) against logits [K+1, vocab]: the longest prefix equal to
    the target's argmax, then the argmax after it. One wait."""
    choices = torch.argmax(target_logits, dim=-1)
    k = draft.shape[0]
    n = torch.cumprod((choices[:k] == draft).int(), dim=0).sum() if k else choices.new_zeros(())
    next_token = choices.gather(0, n.view(1))
    values = torch.cat([n.view(1).to(draft.dtype), next_token.to(draft.dtype), draft]).tolist()
    return values[0], values[1], values[2:]


def verify_stochastic_on_device(target_probs: torch.Tensor, draft: torch.Tensor, draft_probs: torch.Tensor | None,
                                sampler: Sampler) -> tuple[int, int, list[int]]:
    """Speculative sampling of `draft` (1-D, on the device) against the processed target distributions
    [K+1, vocab]; draft_probs [K, vocab] are q_i (None: a point-mass draft). One wait."""
    k = draft.shape[0]
    positions = torch.arange(k, device=draft.device)
    p_x = target_probs[positions, draft]
    q_x = draft_probs[positions, draft] if draft_probs is not None else torch.ones_like(p_x)
    accepted = sampler.uniform(k, target_probs.device) * q_x < p_x  # u < p/q without dividing by a tiny q
    n = torch.cumprod(accepted.int(), dim=0).sum() if k else positions.new_zeros(())
    rows = torch.cat([_residuals(target_probs[:k], draft, draft_probs), target_probs[k:k + 1]])
    token = sampler.sample(rows.index_select(0, n.view(1)))
    values = torch.cat([n.view(1).to(draft.dtype), token.to(draft.dtype), draft]).tolist()
    return values[0], values[1], values[2:]


def _residuals(p: torch.Tensor, draft: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor:
    """norm(max(p_i - q_i, 0)) for every draft position i at once ([K, vocab]); p_i where that has no mass."""
    if draft_probs is None:
        residual = p.clone()
        residual[torch.arange(draft.shape[0], device=p.device), draft] = 0.0
    else:
        residual = torch.clamp(p - draft_probs[: p.shape[0]], min=0.0)
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(residual.dtype).tiny), p)
