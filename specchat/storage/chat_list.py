"""The sidebar's chat list: pins, folders, and searching the history (SQLite FTS5). No Qt.

`Store.chat_list` is a ChatList. Like the Store, each call opens one short session (the Store's own read and write
transactions, handed in) and returns plain frozen records (records.py), so the GUI thread and the model thread may
call it at once. A chat's pin and folder are its `conversations.pinned` and `folder_id` columns (migration 0007);
deleting a folder leaves its chats in no folder.

A search reads the full-text index over the messages' text (`messages_fts`, kept in step by the triggers of 0007):
a message matches when it holds every word of the query (as English stems: "running" finds "runs"; any case,
diacritics ignored), the last word also as the start of a longer one while it is being typed.
The user's text never reaches FTS5 as syntax: its words are taken out (documents/ranking.py's WORD) and each is
quoted, so `"`, `*`, `NEAR(` or `AND` mean nothing; it is read up to MAX_QUERY_CHARS, for MAX_QUERY_WORDS words.
Hits come newest first: FTS5 walks its index backwards by message id and stops at the limit, so a word found in
every message costs no more than a rare one. Chats whose title holds every word come first (the titles folded the
same way, after SQL's LIKE has passed over the plain-ASCII ones).
"""

from __future__ import annotations

import unicodedata
from contextlib import AbstractContextManager
from typing import Callable

from sqlalchemy import and_, func, or_, select, text as sql_text, update
from sqlalchemy.orm import Session

from ..core.errors import StorageError, quoted
from ..core.text import lone_surrogate
from ..documents.ranking import MAX_QUERY_CHARS, MAX_QUERY_WORDS, MIN_WORD_CHARS, STOP_WORDS, WORD
from .document_records import is_whole
from .records import FolderInfo, MessageHit
from .tables import MESSAGES_FTS_TABLE, Conversation, Folder

Transaction = Callable[[], AbstractContextManager[Session]]

MAX_FOLDER_NAME = 80  # characters of a folder's name
MAX_FOLDERS = 1000
MAX_SEARCH_LIMIT = 1000  # message hits one search returns at most
MAX_TITLE_HITS = 20  # chats whose title matches, listed before the messages
MIN_PREFIX_CHARS = 3  # the word being typed is matched as a prefix from this length on
SNIPPET_TOKENS = 14  # words of a message around its match (FTS5's snippet() allows 64 at most)
OPEN_MARK, CLOSE_MARK = "\ue000", "\ue001"  # private-use characters around a match in FTS5's snippet
MAX_ID = 2**63 - 1

_SEARCH = sql_text(
    "SELECT h.id, h.snip, m.conversation_id, m.role, c.title FROM "
    f"(SELECT rowid AS id, snippet({MESSAGES_FTS_TABLE}, 0, :open, :close, '…', :tokens) AS snip "
    f"FROM {MESSAGES_FTS_TABLE} WHERE {MESSAGES_FTS_TABLE} MATCH :match ORDER BY rowid DESC LIMIT :limit) AS h "
    "JOIN messages AS m ON m.id = h.id JOIN conversations AS c ON c.id = m.conversation_id ORDER BY h.id DESC")


class ChatList:
    """Pins, folders and search over the chats of one database: `reading` and `writing` are the Store's
    transactions."""

    def __init__(self, reading: Transaction, writing: Transaction):
        self._reading = reading
        self._writing = writing

    # --- folders --------------------------------------------------------------------------------------------

    def folders(self) -> list[FolderInfo]:
        """Every folder with how many chats it holds, by name (any case)."""
        count = (select(func.count(Conversation.id)).where(Conversation.folder_id == Folder.id)
                 .correlate(Folder).scalar_subquery())
        with self._reading() as session:
            rows = session.execute(select(Folder, count)).all()
        return sorted((_folder_info(row, n) for row, n in rows), key=lambda f: (f.name.casefold(), f.id))

    def create_folder(self, name: str) -> FolderInfo:
        """A new, empty folder named `name` (spaces tidied). StorageError for a name that is empty, longer than
        MAX_FOLDER_NAME, holds control characters or is already a folder's (any case), or past MAX_FOLDERS."""
        name = _folder_name(name)
        with self._writing() as session:
            names = session.scalars(select(Folder.name)).all()
            if len(names) >= MAX_FOLDERS:
                raise StorageError(f"there are {MAX_FOLDERS:,} folders already; delete one to make another")
            _check_unique(name, names)
            row = Folder(name=name)
            session.add(row)
            session.flush()
            return _folder_info(row, 0)

    def rename_folder(self, folder_id: int, name: str) -> FolderInfo:
        """Renames the folder (the same checks as create_folder); returns it renamed. StorageError if it is gone."""
        name = _folder_name(name)
        with self._writing() as session:
            row = _folder(session, folder_id)
            _check_unique(name, session.scalars(select(Folder.name).where(Folder.id != row.id)).all())
            row.name = name
            count = session.scalar(select(func.count(Conversation.id)).where(Conversation.folder_id == row.id))
            return _folder_info(row, count)

    def delete_folder(self, folder_id: int) -> bool:
        """Deletes the folder; its chats are kept, in no folder. False when it was already gone."""
        if not is_whole(folder_id, 1, MAX_ID):
            raise StorageError(f"a folder id must be a positive whole number, not {quoted(folder_id)}")
        with self._writing() as session:
            row = session.get(Folder, folder_id)
            if row is None:
                return False
            session.execute(update(Conversation).where(Conversation.folder_id == folder_id).values(folder_id=None))
            session.delete(row)
            return True

    # --- a chat's place -------------------------------------------------------------------------------------

    def move(self, conversation_id: int, folder_id: int | None) -> None:
        """Puts the chat in the folder (None: in no folder), without moving it in time (updated_at stays).
        StorageError when the chat or the folder does not exist."""
        with self._writing() as session:
            row = _conversation(session, conversation_id)
            row.folder_id = None if folder_id is None else _folder(session, folder_id).id

    def pin(self, conversation_id: int, pinned: bool) -> None:
        """Pins the chat to the top of the list (pinned True) or unpins it; updated_at stays."""
        if not isinstance(pinned, bool):
            raise StorageError(f"pinned must be True or False, not {quoted(pinned)}")
        with self._writing() as session:
            _conversation(session, conversation_id).pinned = pinned

    # --- search ---------------------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 200) -> list[MessageHit]:
        """The chats whose title holds every word of `query` (at most MAX_TITLE_HITS, pinned then newest first),
        then at most `limit` messages that hold every word (newest first), each with a snippet around the match.
        Any text is a valid query: one with no word in it finds nothing ([]). StorageError for a query that is not
        text, or a limit outside 1..MAX_SEARCH_LIMIT."""
        if not isinstance(query, str):
            raise StorageError(f"a search is text, not {quoted(query)}")
        if not is_whole(limit, 1, MAX_SEARCH_LIMIT):
            raise StorageError(f"a search's limit must be a whole number from 1 to {MAX_SEARCH_LIMIT}, "
                               f"not {quoted(limit)}")
        words, prefix = search_words(query)
        if not words:
            return []
        match = " ".join(f'"{word}"' for word in words) + ("*" if prefix else "")
        needles = [_fold(word) for word in words]
        with self._reading() as session:
            hits = _title_hits(session.execute(
                select(Conversation.id, Conversation.title).where(_title_candidates(needles))
                .order_by(Conversation.pinned.desc(), Conversation.updated_at.desc(), Conversation.id.desc())),
                needles)
            rows = session.execute(_SEARCH, {"open": OPEN_MARK, "close": CLOSE_MARK, "tokens": SNIPPET_TOKENS,
                                             "match": match, "limit": limit}).all()
        for row in rows:
            snippet, marks = _unmarked(row.snip or "")
            hits.append(MessageHit(row.conversation_id, row.title, row.id, row.role, snippet, marks))
        return hits


def search_words(query: str) -> tuple[list[str], bool]:
    """The words a search looks for: the distinct words of the query's first MAX_QUERY_CHARS characters, folded
    (documents/ranking.py's WORD: letters and digits, as FTS5's tokenizer cuts them), those of at least
    MIN_WORD_CHARS, stop words left out unless nothing else is left, at most MAX_QUERY_WORDS; and whether the last
    is being typed (the query ends in it, MIN_PREFIX_CHARS or longer), to match as a prefix."""
    folded = query[:MAX_QUERY_CHARS].casefold()
    words: list[str] = []
    for word in WORD.findall(folded):
        if len(word) >= MIN_WORD_CHARS and word not in words:
            words.append(word)
    words = ([w for w in words if w not in STOP_WORDS] or words)[:MAX_QUERY_WORDS]
    typing = bool(words) and len(words[-1]) >= MIN_PREFIX_CHARS and folded.endswith(words[-1])
    return words, typing


def _title_candidates(needles: list[str]):
    """SQL's quick first pass over the titles: the plain-ASCII ones that hold every folded word in any case (LIKE
    folds ASCII only; the words are letters and digits, no wildcard), and every title with another character,
    which _title_hits folds itself."""
    return or_(and_(*(Conversation.title.contains(needle, autoescape=True) for needle in needles)),
               Conversation.title.op("GLOB")("*[^ -~]*"))


def _title_hits(titles, needles: list[str]) -> list[MessageHit]:
    """The chats among `titles` (rows of id and title) whose folded title holds every one of `needles` (words
    folded by _fold), at most MAX_TITLE_HITS, with the words marked."""
    hits = []
    for conversation_id, title in titles:
        plain = _fold(title)
        if not all(needle in plain for needle in needles):
            continue
        folded, origin = _fold_with_origins(title)
        marks = sorted((origin[at], origin[at + len(needle) - 1] + 1) for needle in needles
                       if (at := folded.find(needle)) >= 0)
        hits.append(MessageHit(conversation_id, title, None, None, title, _disjoint(marks)))
        if len(hits) == MAX_TITLE_HITS:
            break
    return hits


def _fold(text: str) -> str:
    """`text` case-folded with its diacritics removed (_fold_with_origins), fast for plain ASCII."""
    if text.isascii():
        return text.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).casefold()


def _fold_with_origins(text: str) -> tuple[str, list[int]]:
    """`text` case-folded with its diacritics removed (as FTS5's unicode61 tokenizer with remove_diacritics folds
    the messages), and for each folded character the index of the character of `text` it came from."""
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        plain = char if char.isascii() else "".join(c for c in unicodedata.normalize("NFKD", char)
                                                    if not unicodedata.combining(c))
        for piece in plain.casefold():
            folded.append(piece)
            origin.append(index)
    return "".join(folded), origin


def _disjoint(marks: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted ranges merged where they overlap (two words found in one place)."""
    merged: list[tuple[int, int]] = []
    for start, end in marks:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return tuple(merged)


def _unmarked(snippet: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """FTS5's snippet without its marks, on one line, and the [start, end) ranges the marks held. A mark character
    that the message itself held is dropped (it can only move a highlight, never reach the HTML unescaped)."""
    text: list[str] = []
    marks: list[tuple[int, int]] = []
    start = None
    for char in snippet:
        if char == OPEN_MARK:
            start = len(text) if start is None else start
        elif char == CLOSE_MARK:
            if start is not None and len(text) > start:
                marks.append((start, len(text)))
            start = None
        else:
            text.append(" " if char in "\r\n\t\v\f" else char)
    return "".join(text), _disjoint(marks)


def _folder_name(name: object) -> str:
    """The name with its spaces tidied; StorageError for one that is no text, empty, too long or has control
    characters."""
    if not isinstance(name, str):
        raise StorageError(f"a folder's name is text, not {quoted(name)}")
    cleaned = " ".join(name.split())
    if not cleaned:
        raise StorageError("a folder's name must not be empty")
    if len(cleaned) > MAX_FOLDER_NAME:
        raise StorageError(f"a folder's name has at most {MAX_FOLDER_NAME} characters, not {len(cleaned):,}")
    if lone_surrogate(cleaned) is not None or any(unicodedata.category(c) == "Cc" for c in cleaned):
        raise StorageError(f"a folder's name cannot hold control characters: {quoted(cleaned)}")
    return cleaned


def _check_unique(name: str, names) -> None:
    if any(other.casefold() == name.casefold() for other in names):
        raise StorageError(f"there is a folder named {quoted(name)} already")


def _folder(session: Session, folder_id: object) -> Folder:
    row = session.get(Folder, folder_id) if is_whole(folder_id, 1, MAX_ID) else None
    if row is None:
        raise StorageError(f"folder {quoted(folder_id)} does not exist")
    return row


def _conversation(session: Session, conversation_id: object) -> Conversation:
    row = session.get(Conversation, conversation_id) if is_whole(conversation_id, 1, MAX_ID) else None
    if row is None:
        raise StorageError(f"conversation {quoted(conversation_id)} does not exist")
    return row


def _folder_info(row: Folder, chat_count: int) -> FolderInfo:
    return FolderInfo(id=row.id, name=row.name, created_at=row.created_at, chat_count=chat_count)
