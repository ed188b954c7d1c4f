"""Chat history and statistics in SQLite (SQLAlchemy 2.0, Alembic migrations); no Qt, no torch. Its errors
(StorageError and the database's) are core/errors.py's.

    store = Store.open()                      # or Store(open_database(path))
    chat = store.create_conversation()
    store.add_message(chat.id, "user", "Hello")
"""

from .db import Database, default_database_path, open_database, quarantine
from .records import ConversationInfo, MessageInfo, RunAggregate, RunInfo, RunRecord
from .store import Store

__all__ = [
    "ConversationInfo", "Database", "MessageInfo", "RunAggregate", "RunInfo", "RunRecord", "Store",
    "default_database_path", "open_database", "quarantine",
]
