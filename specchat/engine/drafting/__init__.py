"""Drafters: cheap proposers of the next K tokens, verified by the target in one pass.

base (the Drafter interface, its Capabilities and optional protocols, Draft, AcceptanceClass, NoDrafter), lookup
(prompt lookup, and over past replies), model (a draft model), eagle (a draft head reading the target's hidden
states), hybrid (prompt lookup composed with either of those), universal (a draft model with another tokenizer,
through text; retokenize holds the text bridge), registry (make_drafter: how each kind in core/vocabulary.py is
built), eagle_network (the draft head's network), past_replies (the index of past replies lookup reads).
"""

from .base import (AcceptanceClass, Capabilities, Draft, Drafter, FreeProposer, GenerationState, NoDrafter,
                   TargetStateReader, check_capabilities, over_vocabulary)
from .eagle import EagleDrafter
from .hybrid import LookupHybrid
from .lookup import PromptLookupDrafter, history_class
from .model import ModelDrafter, TransformersDraftForward
from .registry import make_drafter
from .universal import UniversalDrafter

__all__ = [
    "AcceptanceClass", "Capabilities", "Draft", "Drafter", "EagleDrafter", "FreeProposer", "GenerationState",
    "LookupHybrid", "ModelDrafter", "NoDrafter", "PromptLookupDrafter", "TargetStateReader", "TransformersDraftForward",
    "UniversalDrafter", "check_capabilities", "history_class", "make_drafter", "over_vocabulary",
]
