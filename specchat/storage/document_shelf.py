"""Documents kept with a chat: attached to its messages, read back whole or by passage, and searched (SQLite FTS5).

`Store.documents` is a DocumentShelf. Like the Store, each call opens one short session (the Store's own read and
write transactions, handed in) and returns plain frozen values (document_records.py, documents/document.py), so the
GUI thread and the model thread may call it at once. A document goes with its message: deleting the chat, or the
messages from a position on, deletes its documents and passages (ON DELETE CASCADE), and the full-text index follows
by its triggers (migration 0006).

A search is a user's free text: fts_query (documents/ranking.py, shared with the in-memory ranking) turns it into
a query FTS5 cannot misread (each word quoted, OR-ed, bounded), so that no input, however odd, is FTS5 syntax or
an error.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Callable, Sequence

from sqlalchemy import func, insert, select, text as sql_text
from sqlalchemy.orm import Session

from ..core.errors import StorageError, quoted
from ..documents.document import Document, Passage
from ..documents.ranking import fts_query
from .document_records import (MAX_DOCUMENTS_PER_MESSAGE, DocumentInfo, PassageHit, check_document,
                               is_whole)
from .tables import FTS_TABLE, AttachedDocument, DocumentPassage, Message, utcnow

Transaction = Callable[[], AbstractContextManager[Session]]

MAX_SEARCH_LIMIT = 200  # passages one search returns at most
MAX_DOCUMENT_FILTER = 1000  # document ids a search may be restricted to
MAX_TOKENS = 1 << 40  # a token count's sanity bound

_INFO_COLUMNS = (AttachedDocument.id, AttachedDocument.message_id, AttachedDocument.conversation_id,
                 AttachedDocument.name, AttachedDocument.kind, AttachedDocument.pages, AttachedDocument.chars,
                 AttachedDocument.size_bytes, AttachedDocument.tokens, AttachedDocument.created_at)


class DocumentShelf:
    """The documents of the chats in one database: `reading` and `writing` are the Store's transactions."""

    def __init__(self, reading: Transaction, writing: Transaction):
        self._reading = reading
        self._writing = writing

    def attach(self, message_id: int, document: Document, tokens: int | None = None) -> DocumentInfo:
        """Keep `document` with the message (and its chat), its passages indexed for search; `tokens`: its token
        count under the model it is attached with, if known. Returns what was stored. Raises StorageError for a
        message that does not exist, one with MAX_DOCUMENTS_PER_MESSAGE documents already, or a document outside
        the bounds of document_records.check_document."""
        check_attachment(document, tokens)
        with self._writing() as session:
            message = session.get(Message, message_id)
            if message is None:
                raise StorageError(f"message {message_id} does not exist")
            attached = session.scalar(select(func.count(AttachedDocument.id))
                                      .where(AttachedDocument.message_id == message_id))
            if attached >= MAX_DOCUMENTS_PER_MESSAGE:
                raise StorageError(f"a message holds at most {MAX_DOCUMENTS_PER_MESSAGE} documents")
            row = add_document(session, message.id, message.conversation_id, document, tokens, utcnow())
            return document_info(row)

    def of_chat(self, conversation_id: int) -> list[DocumentInfo]:
        """The chat's documents in the order of their messages (and, on one message, as attached)."""
        with self._reading() as session:
            return [DocumentInfo(*row) for row in session.execute(_infos_where(Message.conversation_id
                                                                               == conversation_id))]

    def load(self, document_id: int) -> Document:
        """The whole document: its text, pages, page starts and passages. StorageError if it does not exist."""
        with self._reading() as session:
            return _load(session, document_id)

    def search(self, conversation_id: int, query: str, limit: int = 8,
               document_ids: Sequence[int] | None = None) -> list[PassageHit]:
        """The chat's passages that best match the words of `query` (FTS5's BM25), best first, at most `limit`;
        only those of `document_ids` when given. A query with no word in it finds nothing ([]), never an error."""
        if not is_whole(limit, 1, MAX_SEARCH_LIMIT):
            raise StorageError(f"a search's limit must be a whole number from 1 to {MAX_SEARCH_LIMIT}, "
                               f"not {quoted(limit)}")
        only = None if document_ids is None else _ids(document_ids)
        match = fts_query(query)
        if match is None or only == []:
            return []
        statement, parameters = _search_statement(only)
        parameters.update(match=match, conversation_id=conversation_id, limit=limit)
        with self._reading() as session:
            rows = session.execute(statement, parameters).all()
        return [PassageHit(document_id=row.document_id, name=row.name, score=-float(row.bm25_score),
                           passage=Passage(row.position, row.page, row.start, row.end, row.text)) for row in rows]

    def for_export(self, conversation_id: int) -> dict[int, list[tuple[DocumentInfo, Document]]]:
        """Every document of the chat, whole, by message id (as attached): what its JSON export carries."""
        with self._reading() as session:
            infos = [DocumentInfo(*row) for row in session.execute(
                _infos_where(Message.conversation_id == conversation_id))]
            shelf: dict[int, list[tuple[DocumentInfo, Document]]] = {}
            for info in infos:
                shelf.setdefault(info.message_id, []).append((info, _load(session, info.id)))
            return shelf


def check_attachment(document: Document, tokens: int | None) -> None:
    """StorageError for a document outside document_records.check_document's bounds or a token count that is not
    a sane whole number: checked before the write transaction begins."""
    check_document(document)
    _check_tokens(tokens)


def documents_of_messages(session: Session, message_ids: Sequence[int]) -> list[tuple[int, DocumentInfo, Document]]:
    """The documents attached to these messages, whole, as (message id, record, document), in message order (a
    fork copies those of the path it takes)."""
    infos = [DocumentInfo(*row) for row in session.execute(_infos_where(Message.id.in_(list(message_ids))))]
    return [(info.message_id, info, _load(session, info.id)) for info in infos]


def add_document(session: Session, message_id: int, conversation_id: int, document: Document, tokens: int | None,
                 created_at: datetime) -> AttachedDocument:
    """Insert a checked document and its passages in the session's transaction (attach and import: one way to
    write one); the full-text index follows by its trigger. Returns the new row, flushed (its id set)."""
    row = AttachedDocument(message_id=message_id, conversation_id=conversation_id, name=document.name,
                           kind=document.kind, pages=document.pages, page_starts=list(document.page_starts),
                           chars=len(document.text), size_bytes=document.size_bytes, sha256=document.sha256,
                           tokens=tokens, text=document.text, created_at=created_at)
    session.add(row)
    session.flush()
    if document.passages:
        session.execute(insert(DocumentPassage), [
            {"document_id": row.id, "position": p.position, "page": p.page, "start": p.start, "end": p.end,
             "text": p.text} for p in document.passages])
    return row


def _search_statement(only: list[int] | None):
    """The search's SQL (best first: FTS5's bm25() is lower for a better match) and its id parameters."""
    restrict, parameters = "", {}
    if only is not None:
        names = [f"d{index}" for index in range(len(only))]
        restrict = f"AND d.id IN ({', '.join(':' + name for name in names)})"
        parameters = dict(zip(names, only))
    statement = sql_text(
        "SELECT p.document_id, d.name, p.position, p.page, p.start, p.\"end\", p.text, "
        f"bm25({FTS_TABLE}) AS bm25_score "
        f"FROM {FTS_TABLE} JOIN document_passages AS p ON p.id = {FTS_TABLE}.rowid "
        "JOIN documents AS d ON d.id = p.document_id "
        f"WHERE {FTS_TABLE} MATCH :match AND d.conversation_id = :conversation_id {restrict} "
        "ORDER BY bm25_score, p.document_id, p.position LIMIT :limit")
    return statement, parameters


def _infos_where(criterion):
    """The DocumentInfo columns of the documents whose message meets `criterion`, in message order, then as
    attached (without their text: a chat's chips do not need it)."""
    return (select(*_INFO_COLUMNS).join(Message, Message.id == AttachedDocument.message_id).where(criterion)
            .order_by(Message.position, AttachedDocument.id))


def _load(session: Session, document_id: int) -> Document:
    """The stored document whole (text, pages, passages in order), read in the session's transaction."""
    row = _document_row(session, document_id)
    passages = session.scalars(select(DocumentPassage).where(DocumentPassage.document_id == document_id)
                               .order_by(DocumentPassage.position))
    return _document(row, tuple(_passage(p) for p in passages))


def _document_row(session: Session, document_id: int) -> AttachedDocument:
    row = session.get(AttachedDocument, document_id) if is_whole(document_id, 1, 2**63 - 1) else None
    if row is None:
        raise StorageError(f"document {quoted(document_id)} does not exist")
    return row


def document_info(row: AttachedDocument) -> DocumentInfo:
    """A stored document's record (without its text)."""
    return DocumentInfo(*(getattr(row, column.key) for column in _INFO_COLUMNS))


def _document(row: AttachedDocument, passages: tuple[Passage, ...]) -> Document:
    return Document(name=row.name, kind=row.kind, text=row.text, pages=row.pages,
                    page_starts=tuple(int(start) for start in row.page_starts or ()), sha256=row.sha256,
                    size_bytes=row.size_bytes, passages=passages)


def _passage(row: DocumentPassage) -> Passage:
    return Passage(position=row.position, page=row.page, start=row.start, end=row.end, text=row.text)


def _check_tokens(tokens: object) -> None:
    if tokens is not None and not is_whole(tokens, 0, MAX_TOKENS):
        raise StorageError(f"a token count must be a whole number from 0 to {MAX_TOKENS:,}, not {quoted(tokens)}")


def _ids(document_ids: Sequence[int]) -> list[int]:
    if isinstance(document_ids, (str, bytes)) or not isinstance(document_ids, Sequence) \
            or len(document_ids) > MAX_DOCUMENT_FILTER:
        raise StorageError(f"a search's documents must be a list of at most {MAX_DOCUMENT_FILTER:,} ids, "
                           f"not {quoted(document_ids)}")
    for document_id in document_ids:
        if not is_whole(document_id, 1, 2**63 - 1):
            raise StorageError(f"a document id must be a positive whole number, not {quoted(document_id)}")
    return sorted(set(document_ids))
