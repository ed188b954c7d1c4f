"""The speculative decoding engine: drafters, the verification loop, sampling and model loading (no Qt)."""

from .chat import Message, build_prompt_ids
from .compat import CompatibilityReport, check_pair
from .drafting import DRAFTER_KINDS, Draft, Drafter, ModelDrafter, NoDrafter, PromptLookupDrafter, make_drafter
from .errors import IncompatibleDraftError, ModelLoadError, PromptError, SpecchatError
from .events import GenerationResult, GenerationStats, Origin, StepEvent
from .models import LoadedModel, LoadOptions, ModelSource, load_model
from .sampling import SamplingParams
from .speculative import GenerationConfig, SpeculativeEngine

__all__ = [
    "CompatibilityReport", "DRAFTER_KINDS", "Draft", "Drafter", "GenerationConfig", "GenerationResult",
    "GenerationStats", "IncompatibleDraftError", "LoadOptions", "LoadedModel", "Message", "ModelDrafter",
    "ModelLoadError", "ModelSource", "NoDrafter", "Origin", "PromptError", "PromptLookupDrafter", "SamplingParams",
    "SpecchatError", "SpeculativeEngine", "StepEvent", "build_prompt_ids", "check_pair", "load_model",
    "make_drafter",
]
