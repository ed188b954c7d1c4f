"""The root of the errors that carry a message meant for the user (CLI and GUI show them without a traceback).

It lives outside the engine and the storage packages so that both derive from it without the storage layer
importing the engine (and torch): `except SpecchatError` catches a storage failure as well as an engine one.
"""


class SpecchatError(Exception):
    """A problem the user can act on; str(error) is a complete one-line explanation."""
