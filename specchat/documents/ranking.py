"""Which passages best match a question: SQLite FTS5's BM25, the one ranking specchat uses.

The chat's documents are ranked in the database's own FTS5 index (storage/documents.py); documents that are not
stored (`specchat generate --attach`, `specchat chat --attach`, a request to `specchat serve`) are ranked the same
way in an in-memory FTS5 table (`rank_passages`). Both turn the user's free text into a query with `fts_query`:
each word quoted, so nothing the user types is FTS5 syntax.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Sequence

from .document import Document, Passage

MAX_QUERY_WORDS = 32  # a question's distinct words a query keeps (a pasted page is not a question)
MAX_QUERY_CHARS = 2000  # of a question's text, read for its words
MIN_WORD_CHARS = 2
# How passages are cut into terms, here and in the database's index (migration 0006_documents): words folded to
# ASCII where they can be, English stems ("running" finds "run").
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
WORD = re.compile(r"[^\W_]+")  # letters and digits: what FTS5's unicode61 tokenizer keeps (it splits on "_")
# Words too common to say what a question is about; BM25 weighs them down anyway, but they cost time.
STOP_WORDS = frozenset("""a an and are as at be but by can do does for from has have how i in is it its me my of on or
our please so than that the their them then there these they this to was we were what when where which who why will
with would you your""".split())


@dataclass(frozen=True)
class RankedPassage:
    """A passage that matches, with its document's key (the caller's: a stored id, or an index) and its BM25 score
    (higher is better)."""

    document_id: int | None
    passage: Passage
    score: float


def fts_query(text: object) -> str | None:
    """An FTS5 MATCH expression for a user's free text: the distinct words of its first MAX_QUERY_CHARS characters
    (stop words left out unless nothing else is left), each quoted, joined by OR, at most MAX_QUERY_WORDS; None
    when it has no word or is not text. Quoting makes every word a plain term: `NEAR(`, `*`, `:`, `"` and the
    operators mean nothing here."""
    if not isinstance(text, str):
        return None
    words: list[str] = []
    for word in WORD.findall(text[:MAX_QUERY_CHARS].casefold()):
        if len(word) >= MIN_WORD_CHARS and word not in words:
            words.append(word)
    if not words:
        return None
    meaningful = [w for w in words if w not in STOP_WORDS] or words
    return " OR ".join(f'"{w}"' for w in meaningful[:MAX_QUERY_WORDS])


def rank_passages(documents: Sequence[tuple[int | None, Document]], question: str,
                  limit: int = 12) -> list[RankedPassage]:
    """The passages of `documents` (pairs of a key and a Document) that best match `question`, best first, at most
    `limit`: BM25 in an in-memory FTS5 table, built for this call (a few ms for a book's worth of passages)."""
    query = fts_query(question)
    if query is None or not documents:
        return []
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(f"CREATE VIRTUAL TABLE passages USING fts5(text, tokenize='{FTS_TOKENIZE}')")
        rows = [(index, number, passage.text) for index, (_, document) in enumerate(documents)
                for number, passage in enumerate(document.passages)]
        connection.executemany("INSERT INTO passages(rowid, text) VALUES (?, ?)",
                               ((index * 1_000_000 + number, text) for index, number, text in rows))
        found = connection.execute("SELECT rowid, bm25(passages) FROM passages WHERE passages MATCH ? "
                                   "ORDER BY bm25(passages) LIMIT ?", (query, limit)).fetchall()
    finally:
        connection.close()
    ranked = []
    for rowid, score in found:
        key, document = documents[rowid // 1_000_000]
        ranked.append(RankedPassage(key, document.passages[rowid % 1_000_000], -score))
    return ranked
