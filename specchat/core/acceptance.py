"""The arithmetic of acceptance, shared by the draft-length policy, the catalog's predictions, the stats and the
benchmark reports: how many tokens one verification yields at a given acceptance rate. Pure Python."""

from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens produced by one verification of k draft tokens if each is accepted with probability alpha
    (independently): 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha); the +1 is the target's own token."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
