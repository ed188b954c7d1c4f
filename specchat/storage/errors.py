"""The one exception the storage layer raises for problems the user can act on."""


class StorageError(Exception):
    """The chat database cannot be opened, read or written, or imported data is invalid.

    str(error) is a complete one-line explanation meant for the user (the GUI shows it in a dialog). It does not
    derive from specchat.engine.SpecchatError on purpose: importing the engine pulls in torch, and storage must
    stay importable (and fast to import) without it; callers that show errors catch both.
    """
