"""The one exception the storage layer raises for problems the user can act on."""


from ..errors import SpecchatError

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
