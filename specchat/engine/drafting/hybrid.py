"""Prompt lookup where the text repeats itself, a drafter with a model (a draft model, a draft head) elsewhere.

Copying (editing, summarising, extracting, code) is where prompt lookup shines and a small model is weakest;
free-form text is the reverse. Each step the engine first asks for the free proposal (a lookup match of length n:
its own acceptance rate, no drafting cost), weighs it against the model drafter (its acceptance rate, plus its cost
per token) and takes whichever the live statistics say yields more tokens per second.
"""

from __future__ import annotations

from typing import Sequence

from .base import Draft, Drafter, GenerationState, TargetStateReader
from .lookup import PromptLookupDrafter


class LookupHybrid(Drafter):
    """Two drafters composed: `lookup` (prompt lookup, optionally over past replies) for the free proposal, and
    `model_drafter` (one that runs a model) for the paid one.

    Its capabilities and protocols are the model drafter's (its own begin and accept_target_states, where it has
    them: a head hears of every target pass, lookup steps' included; prompt lookup keeps no state), plus free
    proposals (FreeProposer). A draft model's cache simply lags behind during lookup steps and catches up in one
    pass at its next proposal, so the model drafter hears of a verification only after a step it drafted. A
    stateless head has nothing to catch up on; an attending one feeds the states the lookup steps verified through
    its attention block when it next drafts.
    """

    def __init__(self, lookup: PromptLookupDrafter, model_drafter: Drafter, name: str = "hybrid"):
        if not model_drafter.capabilities.uses_model:
            raise ValueError("a lookup hybrid needs a drafter that runs a model")
        self.lookup = lookup
        self.model_drafter = model_drafter
        self.name = name
        self.capabilities = model_drafter.capabilities
        self._model_proposed = False  # whether the last proposal made was the model drafter's
        for protocol, method in ((GenerationState, "begin"), (TargetStateReader, "accept_target_states")):
            if isinstance(model_drafter, protocol):  # then the hybrid is one too (an instance attribute counts)
                setattr(self, method, getattr(model_drafter, method))

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
