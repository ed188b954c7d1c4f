"""Drafters: cheap proposers of the next K tokens, verified by the target in one pass.

base (the Drafter interface, its Capabilities and optional protocols, Draft, AcceptanceClass, NoDrafter), lookup
(prompt lookup, and over past replies), model (a draft model), eagle (a draft head reading the target's hidden
states), hybrid (prompt lookup composed with either of those), universal (a draft model with another tokenizer,
through text; retokenize holds the text bridge), registry (the table of drafter kinds, their names and colours, and
make_drafter); backends (where a draft model runs).
"""

from .base import (AcceptanceClass, Capabilities, Draft, Drafter, FreeProposer, GenerationState, NoDrafter,
                   TargetStateReader, check_capabilities, over_vocabulary)
from .eagle import EagleDrafter
from .hybrid import LookupHybrid
from .lookup import PromptLookupDrafter, history_class
from .model import ModelDrafter, TransformersDraftForward
from .registry import (DRAFTER_KEYS, DRAFTER_KINDS, DRAFTERS, HEAD_DRAFTERS, LOOKUP_DRAFTERS, MENU, MODEL_DRAFTERS,
                       DrafterInfo, drafter_info, make_drafter)
from .universal import UniversalDrafter

__all__ = [
    "AcceptanceClass", "Capabilities", "DRAFTERS", "DRAFTER_KEYS", "DRAFTER_KINDS", "Draft", "Drafter", "DrafterInfo",
    "EagleDrafter", "FreeProposer", "GenerationState", "HEAD_DRAFTERS",
    "LOOKUP_DRAFTERS", "LookupHybrid", "MENU", "MODEL_DRAFTERS", "ModelDrafter", "NoDrafter", "PromptLookupDrafter",
    "TargetStateReader", "TransformersDraftForward", "UniversalDrafter", "check_capabilities", "drafter_info",
    "history_class", "make_drafter", "over_vocabulary",
]
