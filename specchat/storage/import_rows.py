"""An import's messages as database rows: converted before the write transaction, inserted in it in batches.

An export can hold about two million messages (the window's 50 MB cap). The import is all or nothing, so every row
goes in one write transaction, which holds SQLite's write lock: a reply saved by another thread meanwhile waits for
it (up to the busy timeout). So everything that can be done before the transaction is: each value is converted to
what SQLite stores by the column type's own bind processor (UTCDateTime, JSONText: the same conversion an ORM
insert makes), and the transaction only hands ready tuples to the driver's executemany, about ten times faster than
an ORM insert of the same rows. The chat's documents (a few, each one large row and its passages) go in after its
messages, in the same transaction, each to the message at its position.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from sqlalchemy import select
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from . import exchange
from .document_shelf import add_document
from .tables import Message, utcnow

COLUMNS = ("position", "role", "text", "created_at", "stopped", "spans", "finish_reason")  # after conversation_id


def message_rows(messages: tuple[exchange.ImportedMessage, ...], dialect: Dialect, now: datetime,
                 on_progress: Callable[[exchange.ImportProgress], None] | None = None) -> list[tuple]:
    """The messages as tuples of stored values in COLUMNS order (a message without a time gets `now`); reports
    "preparing" progress every exchange.PROGRESS_EVERY messages."""
    processors = [Message.__table__.c[name].type.bind_processor(dialect) for name in COLUMNS]
    rows, total = [], len(messages)
    for position, m in enumerate(messages):
        values = (position, m.role, m.text, m.created_at or now, m.stopped, exchange.spans_to_json(m.spans),
                  m.finish_reason)
        rows.append(tuple(value if process is None or value is None else process(value)
                          for process, value in zip(processors, values)))
        if on_progress is not None and (position + 1) % exchange.PROGRESS_EVERY == 0:
            on_progress(exchange.ImportProgress("preparing", position + 1, total))
    return rows


def insert_messages(session: Session, conversation_id: int, rows: list[tuple],
                    on_progress: Callable[[exchange.ImportProgress], None] | None = None,
                    documents: tuple[exchange.ImportedDocument, ...] = ()) -> None:
    """Inserts rows made by message_rows into the conversation, inside the session's transaction, in batches of
    exchange.PROGRESS_EVERY with a "writing" report after each; then `documents`, each attached to the message at
    its position (exchange.parse_json checked that it exists)."""
    names = ("conversation_id",) + COLUMNS
    statement = f"INSERT INTO {Message.__tablename__} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    connection, step = session.connection(), exchange.PROGRESS_EVERY
    for first in range(0, len(rows), step):
        batch = rows[first:first + step]
        connection.exec_driver_sql(statement, [(conversation_id,) + row for row in batch])
        if on_progress is not None:
            on_progress(exchange.ImportProgress("writing", first + len(batch), len(rows)))
    if documents:
        insert_documents(session, conversation_id, documents)


def insert_documents(session: Session, conversation_id: int,
                     documents: tuple[exchange.ImportedDocument, ...]) -> None:
    """Inserts the imported documents, each with the message at its position in the conversation (a document
    without a time gets the import's), through the shelf's one way of writing a document; tokens are left
    uncounted: they were counted under a model this database may not have."""
    message_ids = dict(session.execute(select(Message.position, Message.id)
                                       .where(Message.conversation_id == conversation_id)).all())
    now = utcnow()
    for imported in documents:
        add_document(session, message_ids[imported.message], conversation_id, imported.document, None,
                     imported.created_at or now)
