"""Drafters: cheap proposers of the next K tokens, verified by the target in one pass.

base (the Drafter interface, Draft, Capabilities, NoDrafter), lookup (prompt lookup, and over past replies), model
(a draft model), eagle (a draft head reading the target's hidden states), hybrid (prompt lookup around either of
those), universal (a draft model with another tokenizer, through text; retokenize holds the text bridge), registry
(the table of drafter kinds, their names and colours, and make_drafter).
"""

from .base import Capabilities, Draft, Drafter, NoDrafter, over_vocabulary
from .eagle import EagleDrafter
from .hybrid import EagleHybridDrafter, HybridDrafter, LookupHybrid
from .lookup import PromptLookupDrafter, history_class
from .model import ModelDrafter, TransformersRunner
from .registry import (DRAFTER_KEYS, DRAFTER_KINDS, DRAFTERS, HEAD_DRAFTERS, LOOKUP_DRAFTERS, MENU, MODEL_DRAFTERS,
                       DrafterInfo, drafter_info, make_drafter)
from .universal import UniversalDrafter

__all__ = [
    "Capabilities", "DRAFTERS", "DRAFTER_KEYS", "DRAFTER_KINDS", "Draft", "Drafter", "DrafterInfo", "EagleDrafter",
    "EagleHybridDrafter", "HEAD_DRAFTERS", "HybridDrafter", "LOOKUP_DRAFTERS", "LookupHybrid", "MENU",
    "MODEL_DRAFTERS", "ModelDrafter", "NoDrafter", "PromptLookupDrafter", "TransformersRunner", "drafter_info",
    "UniversalDrafter", "history_class", "make_drafter", "over_vocabulary",
]
