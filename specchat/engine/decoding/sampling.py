"""Sampling and the verification rule of speculative decoding.

Notation (Leviathan et al. 2023, Chen et al. 2023): for draft position i, q_i is the draft's distribution and
p_i the target's, both after the same temperature / top-k / top-p processing. The target verifies K draft tokens
x_1..x_K with one forward pass that yields p_1..p_{K+1}.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_SMALLEST_DIVISOR = torch.finfo(torch.float32).tiny  # a temperature below it divides as this (the same limit)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy (argmax)
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top-p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top-k must be >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """Turns logits into the processed distribution and draws from it with a seeded generator."""

    def __init__(self, params: SamplingParams, seed: int, device: torch.device | str = "cpu"):
        self.params = params
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed distribution over the vocabulary for each row of `logits` (float32).

        Each row is shifted by its maximum before it is divided by the temperature (softmax is the same), so a
        vanishing temperature gives its limit, the most likely token (ties shared), never inf - inf = NaN; the
        divisor is at least float32's smallest normal number, so it cannot round to zero."""
        logits = logits.float()
        logits = (logits - logits.amax(dim=-1, keepdim=True)) / max(self.params.temperature, _SMALLEST_DIVISOR)
        if self.params.top_k and self.params.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.params.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if self.params.top_p < 1.0:
            probs = _nucleus(probs, self.params.top_p)
        return probs

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token per row of `probs`."""
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)

    def uniform(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, device=device)

    def next_token(self, logits: torch.Tensor) -> int:
        """Token from a single row of logits: argmax when greedy, else a draw from the processed distribution."""
        if self.greedy:
            return int(torch.argmax(logits))
        return int(self.sample(self.probs(logits)))


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, renormalised. The most likely token
    is always kept: a top_p below float32's precision (1e-50 rounds to 0) still leaves a distribution, not 0/0."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    dropped = mass_before >= top_p
    dropped[..., 0] = False
    sorted_probs = sorted_probs.masked_fill(dropped, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def verify_greedy(target_logits: torch.Tensor, draft: list[int]) -> tuple[int, int]:
    """Greedy verification: accept the longest draft prefix equal to the target's argmax.

    target_logits has K+1 rows; row i predicts the token after draft[:i]. Returns (n accepted, next token), where the
    next token is the target's own argmax after the accepted prefix (a correction, or the bonus token if n == K).
    Accepting only argmax matches makes the output identical to plain greedy decoding of the target.
    """
    choices = torch.argmax(target_logits, dim=-1).tolist()
    n = 0
    while n < len(draft) and draft[n] == choices[n]:
        n += 1
    return n, choices[n]


def verify_stochastic(
    target_probs: torch.Tensor,
    draft: list[int],
    draft_probs: torch.Tensor | None,
    sampler: Sampler,
) -> tuple[int, int]:
    """Speculative sampling: the returned tokens are distributed exactly as target-only sampling.

    Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), stopping at the first rejection. At a rejected position
    draw from the residual r = normalize(max(p_i - q_i, 0)); if all K are accepted draw a bonus token from p_{K+1}.
    Then P(token = x) = q(x) min(1, p/q) + (1 - sum_y min(p, q)) r(x) = min(p, q) + max(p - q, 0) = p(x).
    draft_probs None means a model-free drafter: q_i is a point mass on x_i, so the accept probability is p_i(x_i)
    and the residual is p_i with x_i removed.
    """
    k = len(draft)
    device = target_probs.device
    if k == 0:
        return 0, int(sampler.sample(target_probs[0]))
    positions = torch.arange(k, device=device)
    tokens = torch.tensor(draft, device=device)
    p_x = target_probs[positions, tokens]
    q_x = draft_probs[positions, tokens] if draft_probs is not None else torch.ones_like(p_x)
    accepted = sampler.uniform(k, device) * q_x < p_x  # u < p/q without dividing by a possibly tiny q
    n = int(torch.cumprod(accepted.int(), dim=0).sum())
    if n == k:
        return k, int(sampler.sample(target_probs[k]))
    return n, int(sampler.sample(residual_distribution(target_probs[n], draft_probs, n, draft[n])))


def residual_distribution(p: torch.Tensor, draft_probs: torch.Tensor | None, position: int, token: int) -> torch.Tensor:
    """normalize(max(p - q, 0)) for the rejected position; falls back to p if the residual has no mass."""
    if draft_probs is None:
        residual = p.clone()
        residual[token] = 0.0
    else:
        residual = torch.clamp(p - draft_probs[position], min=0.0)
    total = residual.sum()
    if total <= 0:
        return p
    return residual / total
