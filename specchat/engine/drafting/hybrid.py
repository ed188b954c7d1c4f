"""Prompt lookup where the text repeats itself, a drafter with a model (a draft model, a draft head) elsewhere.

Copying (editing, summarising, extracting, code) is where prompt lookup shines and a small model is weakest;
free-form text is the reverse. Each step the engine first asks for the free proposal (a lookup match of length n:
its own acceptance rate, no drafting cost), weighs it against the model drafter (its acceptance rate, plus its cost
per token) and takes whichever the live statistics say yields more tokens per second.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from ..decoding.sampling import Sampler
from .base import Draft, Drafter
from .lookup import PromptLookupDrafter


class LookupHybrid(Drafter):
    """Two drafters composed: `lookup` (prompt lookup, optionally over past replies) for the free proposal, and
    `model_drafter` (one that runs a model) for the paid one.

    Its capabilities are the model drafter's, plus free proposals (FreeProposer). A draft model's cache simply lags
    behind during lookup steps and catches up in one pass at its next proposal, so the model drafter hears of a
    verification only after a step it drafted. A stateless head has nothing to catch up on; an attending one feeds
    the states the lookup steps verified through its attention block when it next drafts.
    """

    def __init__(self, lookup: PromptLookupDrafter, model_drafter: Drafter, name: str = "hybrid"):
        if not model_drafter.capabilities.uses_model:
            raise ValueError("a lookup hybrid needs a drafter that runs a model")
        self.lookup = lookup
        self.model_drafter = model_drafter
        self.name = name
        self.capabilities = replace(model_drafter.capabilities, offers_free_proposals=True)
        self._model_proposed = False  # whether the last proposal made was the model drafter's

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        """GenerationState: the model drafter's (prompt lookup keeps no state)."""
        if self.capabilities.has_generation_state:
            self.model_drafter.begin(prompt, sampler, target_vocab_size)

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        """FreeProposer: the lookup's proposal of up to k tokens."""
        self._model_proposed = False
        return self.lookup.propose(context, k)

    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        """The model drafter's proposal of up to k tokens."""
        self._model_proposed = True
        return self.model_drafter.propose(context, k)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        """Tells the model drafter, after a step it drafted; after a lookup step its cache holds only agreed tokens
        already, and catches up at its next proposal."""
        if self._model_proposed:
            self.model_drafter.update(context, n_accepted)

    def accept_target_states(self, states: torch.Tensor, tokens: Sequence[int]) -> None:
        """TargetStateReader: the model drafter's, after every target pass (lookup steps' included)."""
        if self.capabilities.reads_target_states:
            self.model_drafter.accept_target_states(states, tokens)
