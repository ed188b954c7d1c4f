"""The one exception the storage layer raises for problems the user can act on."""


from ..errors import SpecchatError


class StorageError(SpecchatError):
    """The chat database cannot be opened, read or written, or imported data is invalid.

    str(error) is a complete one-line explanation meant for the user (the GUI shows it in a dialog). Its root is
    specchat.errors.SpecchatError, not the engine's module: storage stays importable (and fast to import) without
    torch, and `except SpecchatError` catches it.
    """
