"""A target model with an optional draft model, checked for compatibility before the draft's weights load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .compat import CompatibilityReport, check_pair
from .drafters import MODEL_DRAFTERS, make_drafter
from .errors import IncompatibleDraftError, SpecchatError
from .models import LoadedModel, LoadOptions, ModelSource, load_config, load_model, load_tokenizer
from .speculative import SpeculativeEngine


@dataclass
class ModelPair:
    target: LoadedModel
    draft: LoadedModel | None = None

    def engine(self, drafter: str) -> SpeculativeEngine:
        if drafter in MODEL_DRAFTERS and self.draft is None:
            raise SpecchatError(f"the {drafter} drafter needs a draft model (give --draft SRC)")
        draft_model = self.draft.model if self.draft is not None else None
        return SpeculativeEngine(self.target.model, self.target.tokenizer, make_drafter(drafter, draft_model))


def check_sources(target: ModelSource, draft: ModelSource, options: LoadOptions = LoadOptions()) -> CompatibilityReport:
    """Compares tokenizers and configs only, so a bad pair is refused in seconds, before any weights load."""
    return check_pair(load_tokenizer(target, options), load_tokenizer(draft, options),
                      load_config(target, options), load_config(draft, options))


def load_pair(target: ModelSource, draft: ModelSource | None = None, options: LoadOptions = LoadOptions(),
              on_loaded: Callable[[str], None] | None = None) -> ModelPair:
    """`on_loaded("target")` / `on_loaded("draft")` after each model is in memory (e.g. to measure memory)."""
    if draft is not None:
        report = check_sources(target, draft, options)
        if not report.compatible:
            raise IncompatibleDraftError(f"{draft.describe()} cannot draft for {target.describe()}: "
                                         + "; ".join(report.reasons))
    loaded_target = load_model(target, options)
    if on_loaded:
        on_loaded("target")
    loaded_draft = load_model(draft, options) if draft is not None else None
    if on_loaded and draft is not None:
        on_loaded("draft")
    return ModelPair(loaded_target, loaded_draft)
