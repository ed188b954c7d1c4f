"""Errors that carry a message meant for the user (CLI and GUI show them without a traceback)."""


class SpecchatError(Exception):
    """A problem the user can act on; str(error) is a complete one-line explanation."""


class ModelLoadError(SpecchatError):
    """A model or tokenizer could not be found, read or loaded."""


class IncompatibleDraftError(SpecchatError):
    """The draft model cannot be used with the target (vocabularies differ)."""


class PromptError(SpecchatError):
    """The prompt is empty, malformed, or does not fit the model's context window."""
