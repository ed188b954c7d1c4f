"""Errors that carry a message meant for the user (CLI and GUI show them without a traceback)."""


from ..errors import SpecchatError  # noqa: F401  (the root, shared with the storage layer)


class ModelLoadError(SpecchatError):
    """A model or tokenizer could not be found, read or loaded."""


class IncompatibleDraftError(SpecchatError):
    """The draft model cannot be used with the target (vocabularies differ)."""


class PromptError(SpecchatError):
    """The prompt is empty, malformed, or does not fit the model's context window."""


class PrefillCancelled(Exception):
    """Not for the user: the cancel event was set while a runner prefilled a prompt, between two of its passes
    (SpeculativeEngine.stream turns it into a stopped reply)."""
