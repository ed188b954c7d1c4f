"""Chat history and statistics in SQLite (SQLAlchemy 2.0, Alembic migrations); no Qt, no torch.

    store = Store.open()                      # or Store(open_database(path))
    chat = store.create_conversation()
    store.add_message(chat.id, "user", "Hello")
"""

from .db import Database, default_database_path, open_database, quarantine
from .errors import DatabaseDamaged, DatabaseLocked, DatabaseUnusable, StorageError
from .records import ConversationInfo, MessageInfo, RunAggregate, RunInfo, RunRecord
from .store import Store

__all__ = [
    "ConversationInfo", "Database", "DatabaseDamaged", "DatabaseLocked", "DatabaseUnusable", "MessageInfo",
    "RunAggregate", "RunInfo", "RunRecord", "Store", "StorageError",
    "default_database_path", "open_database", "quarantine",
]
