"""Every error that carries a message meant for the user (the CLI, the GUI and the API show them without a
traceback), under one root.

SpecchatError is the root; the engine's (loading, drafts, prompts, passes) and the storage layer's families derive
from it here, in a module that imports nothing, so that `except SpecchatError` catches them all and reaching an
error never loads torch or the database.
"""


class SpecchatError(Exception):
    """A problem the user can act on; str(error) is a complete one-line explanation."""


def first_line(error: BaseException) -> str:
    """The first line of an error a library raised (its type's name when it says nothing), for a message that
    quotes it; with what to do when the library refuses to run a model's own code."""
    text = str(error).strip() or type(error).__name__
    line = text.splitlines()[0]
    if "custom code" in line or "trust_remote_code" in line:  # transformers' words for an `auto_map` folder
        line += (" specchat does not run a model's own Python code unless asked to: pass --trust-remote-code only "
                 "for a folder whose code you have read.")
    return line


# -- the engine's ---------------------------------------------------------------------------------------------------

class ModelLoadError(SpecchatError):
    """A model or tokenizer could not be found, read or loaded."""


class IncompatibleDraftError(SpecchatError):
    """The draft model cannot be used with the target (vocabularies differ)."""


class PromptError(SpecchatError):
    """The prompt is empty, malformed, or does not fit the model's context window."""


class DecodeError(SpecchatError):
    """A forward pass of a loaded model failed while a reply was generated (llama.cpp refused a batch, the
    context is full): the model loaded, so this is not a ModelLoadError."""


class ContinueError(SpecchatError):
    """A reply cannot be continued: it is not the chat's last, it was not cut short (Stop, the token limit, the
    context window, a kill), a remote engine wrote it, or it fills the context window by itself."""


class PrefillCancelled(Exception):
    """Not for the user: the cancel event was set while a runner prefilled a prompt, between two of its passes
    (SpeculativeEngine.stream turns it into a stopped reply)."""


# -- documents' ----------------------------------------------------------------------------------------------------

class DocumentError(SpecchatError):
    """A file could not be attached: unreadable, of a format specchat does not read, too large, encrypted, damaged,
    or with no text. str(error) names the file and says what to do (the composer shows it)."""


class ReadCancelled(DocumentError):
    """The user pressed Cancel while a file was read (specchat.documents.reading): nothing was attached."""


# -- the storage layer's --------------------------------------------------------------------------------------------

QUOTE_LIMIT = 60  # characters of a bad value that an error message quotes


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """The value as an error message quotes it: its repr, cut to about `limit` characters with its full length
    said. Imported files are untrusted and can hold megabytes in one field; a message that repeated it whole froze
    the window that laid it out (issue 37). Containers are named by type and size, never expanded."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} items"
    if isinstance(value, dict):
        return f"an object of {len(value):,} items"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"an integer of {value.bit_length():,} bits"  # str() of a huge int is itself slow, and refused
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)[:limit]
    return f"a value of type {type(value).__name__}"


class StorageError(SpecchatError):
    """The chat database cannot be opened, read or written, or imported data is invalid.

    str(error) is a complete one-line explanation meant for the user (the GUI shows it in a dialog). Its root is
    specchat.core.errors.SpecchatError, not the engine's module: storage stays importable (and fast to import) without
    torch, and `except SpecchatError` catches it. `detail` is SQLite's own words, where there are any.
    """

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class DatabaseLocked(StorageError):
    """Another program holds the database's lock for longer than the busy timeout; trying again may work."""


class DatabaseDamaged(StorageError):
    """The file is not a usable SQLite database (a damaged page, a foreign file): the app moves it aside."""


class DatabaseUnusable(StorageError):
    """The database cannot be used as it is: written by a newer specchat, an upgrade that failed, a folder
    that cannot be written. The file is left unchanged."""
