"""An import's messages as database rows: converted before the write transaction, inserted in it in batches.

An export can hold about two million messages (the window's 50 MB cap). The import is all or nothing, so every row
goes in one write transaction, which holds SQLite's write lock: a reply saved by another thread meanwhile waits for
it (up to the busy timeout). So everything that can be done before the transaction is: each value is converted to
what SQLite stores by the column type's own bind processor (UTCDateTime, JSONText: the same conversion an ORM
insert makes), and the transaction only hands ready tuples to the driver's executemany, about ten times faster than
an ORM insert of the same rows. The chat's documents (a few, each one large row and its passages) go in after its
messages, in the same transaction, each to the message at its index.

A chat is a tree (0007): each row names its parent by index in the import. The rows get their ids in the write
transaction (the table's largest id plus one, onwards: no other writer can take one meanwhile), so that each parent's
id is known before its children are inserted, without a read back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from sqlalchemy import func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from . import exchange
from .document_shelf import add_document
from .tables import Conversation, Message, utcnow

COLUMNS = ("position", "role", "text", "created_at", "stopped", "spans", "finish_reason")  # after the ids


def message_rows(messages: tuple[exchange.ImportedMessage, ...], dialect: Dialect, now: datetime,
                 on_progress: Callable[[exchange.ImportProgress], None] | None = None) -> list[tuple]:
    """The messages as tuples (the parent's index, then the stored values in COLUMNS order: a message's position is
    its depth, and one without a time gets `now`); reports "preparing" progress every exchange.PROGRESS_EVERY
    messages."""
    processors = [Message.__table__.c[name].type.bind_processor(dialect) for name in COLUMNS]
    rows, depths, total = [], [], len(messages)
    for position, m in enumerate(messages):
        depths.append(depths[m.parent] + 1 if m.parent is not None else 0)
        values = (depths[-1], m.role, m.text, m.created_at or now, m.stopped, exchange.spans_to_json(m.spans),
                  m.finish_reason)
        rows.append((m.parent,) + tuple(value if process is None or value is None else process(value)
                                        for process, value in zip(processors, values)))
        if on_progress is not None and (position + 1) % exchange.PROGRESS_EVERY == 0:
            on_progress(exchange.ImportProgress("preparing", position + 1, total))
    return rows


def insert_messages(session: Session, conversation: Conversation, rows: list[tuple],
                    on_progress: Callable[[exchange.ImportProgress], None] | None = None,
                    documents: tuple[exchange.ImportedDocument, ...] = (), shown: int | None = None) -> None:
    """Inserts rows made by message_rows into the conversation (flushed: its id set), inside the session's
    transaction, in batches of exchange.PROGRESS_EVERY with a "writing" report after each; then `documents`, each
    attached to the message at its index (exchange.parse_json checked that it exists). The branch on screen ends
    at the message at index `shown` (None: the last)."""
    first_id = session.scalar(select(func.coalesce(func.max(Message.id), 0))) + 1
    names = ("id", "conversation_id", "parent_id") + COLUMNS
    statement = f"INSERT INTO {Message.__tablename__} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    connection, step = session.connection(), exchange.PROGRESS_EVERY
    for first in range(0, len(rows), step):
        batch = rows[first:first + step]
        connection.exec_driver_sql(statement, [
            (first_id + first + i, conversation.id, None if row[0] is None else first_id + row[0]) + row[1:]
            for i, row in enumerate(batch)])
        if on_progress is not None:
            on_progress(exchange.ImportProgress("writing", first + len(batch), len(rows)))
    if rows:
        conversation.leaf_id = first_id + (shown if shown is not None else len(rows) - 1)
    now = utcnow()
    for imported in documents:
        add_document(session, first_id + imported.message, conversation.id, imported.document, None,
                     imported.created_at or now)
