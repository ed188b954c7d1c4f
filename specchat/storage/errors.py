"""The one exception the storage layer raises for problems the user can act on."""


from ..errors import SpecchatError


class StorageError(SpecchatError):
    """The chat database cannot be opened, read or written, or imported data is invalid.

    str(error) is a complete one-line explanation meant for the user (the GUI shows it in a dialog). Its root is
    specchat.errors.SpecchatError, not the engine's module: storage stays importable (and fast to import) without
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
