"""One way to read a row by its id inside a Store transaction, for every part of the Store."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..core.errors import StorageError


def get_row(session: Session, model: type, row_id: int, what: str):
    """The row with this id, or a StorageError (it may have been deleted from another window)."""
    row = session.get(model, row_id)
    if row is None:
        raise StorageError(f"{what} {row_id} does not exist")
    return row
