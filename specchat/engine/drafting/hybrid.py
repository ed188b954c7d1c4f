"""Prompt lookup where the text repeats itself, a drafter with a model (a draft model, a draft head) elsewhere.

Copying (editing, summarising, extracting, code) is where prompt lookup shines and a small model is weakest;
free-form text is the reverse. Each step the engine first asks for the free proposal (a lookup match of length n:
its own acceptance rate, no drafting cost), weighs it against the inner drafter (its acceptance rate, plus its cost
per token) and takes whichever the live statistics say yields more tokens per second.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..eagle import EagleHead
from ..history import SuffixIndex
from ..sampling import Sampler
from .base import Draft, Drafter
from .eagle import EagleDrafter
from .lookup import PromptLookupDrafter
from .model import ModelDrafter


class LookupHybrid(Drafter):
    """Wraps a drafter that runs a model: its proposals, and prompt lookup (optionally over past replies) as the
    free proposal.

    A draft model's cache simply lags behind during lookup steps and catches up in one pass at its next proposal,
    so the inner drafter hears of a verification only after a step it drafted. A stateless head has nothing to
    catch up on; an attending one feeds the states the lookup steps verified through its attention block when it
    next drafts. Anything else (a draft model's cached_tokens) is the inner drafter's.
    """

    def __init__(self, inner: Drafter, history: SuffixIndex | None = None, name: str = "hybrid"):
        if not inner.uses_model:
            raise ValueError("a lookup hybrid needs a drafter that runs a model")
        self.inner = inner
        self.name = name
        self.capabilities = inner.capabilities
        self._lookup = PromptLookupDrafter(history=history)
        self._inner_proposed = False

    def __getattr__(self, attribute: str):
        if attribute == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        self.inner.begin(prompt, sampler, target_vocab_size)

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        self._inner_proposed = False
        return self._lookup.propose(context, k)

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        self._inner_proposed = True
        return self.inner.propose(context, k)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        if self._inner_proposed:  # after a lookup step the model's cache holds only agreed tokens already
            self.inner.update(context, n_accepted)

    def accept_target_states(self, states: torch.Tensor, tokens: Sequence[int]) -> None:
        self.inner.accept_target_states(states, tokens)

    @property
    def forward_count(self) -> int:
        return self.inner.forward_count


def HybridDrafter(model: torch.nn.Module, lean: bool | None = None, vocab_ids: torch.Tensor | None = None,
                  history: SuffixIndex | None = None) -> LookupHybrid:
    """The draft model with prompt lookup (the "hybrid" drafter)."""
    return LookupHybrid(ModelDrafter(model, lean, vocab_ids), history=history, name="hybrid")


def EagleHybridDrafter(head: EagleHead, target: torch.nn.Module,
                       history: SuffixIndex | None = None) -> LookupHybrid:
    """The draft head with prompt lookup (the "eagle-hybrid" drafter)."""
    return LookupHybrid(EagleDrafter(head, target), history=history, name="eagle-hybrid")
