"""What the document shelf hands out (frozen, plain values: they cross threads), and the bounds a stored document
keeps within, checked once for a document attached in the app and for one read from an imported file.

The document itself is the documents room's `Document` and `Passage` (documents/document.py); these records only add
where it is stored. An imported file is hostile: every bound here is checked before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..core.errors import StorageError, quoted
from ..core.text import lone_surrogate
from ..documents.budget import ReadLimits
from ..documents.document import KINDS, Document, Passage

# The bounds of one stored document: those of reading a file (the documents room's ReadLimits, by default), so
# that whatever the reader makes is kept, and an imported file holds no more than a read one could.
_READ = ReadLimits()
MAX_DOCUMENT_CHARS = _READ.max_chars  # characters of a document's text
MAX_PAGES = _READ.max_pages  # pages of one document
MAX_FILE_BYTES = _READ.max_bytes  # the size the file had when read
MAX_PASSAGES = MAX_DOCUMENT_CHARS // 100  # passages of one document (the reader cuts about 1,200 characters each)
MAX_NAME_CHARS = 1000  # characters of a document's (file) name
MAX_DOCUMENTS_PER_MESSAGE = 64  # documents attached to one message
PASSAGE_OVERLAP = 2  # passages may overlap, but hold at most this many times the text's characters together

SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class DocumentInfo:
    """A stored document without its text: what a chip in the chat shows. `tokens` is its token count under the
    model it was attached with (None until counted); `created_at` is timezone-aware UTC."""

    id: int
    message_id: int
    conversation_id: int
    name: str
    kind: str
    pages: int | None
    chars: int
    size_bytes: int
    tokens: int | None
    created_at: datetime


@dataclass(frozen=True)
class PassageHit:
    """A passage a search found: its document's id and name, the passage, and its BM25 score (higher is better)."""

    document_id: int
    name: str
    passage: Passage
    score: float


def check_document(document: Document, where: str = "document") -> None:
    """Raises StorageError, naming `where` and the field, unless `document` keeps within the bounds above and is
    consistent: a known kind, a SHA-256 in hex, page starts inside the text in order, one per page, and passages
    numbered 0, 1, ... in order whose text is the text between their start and end, on a page the document has."""
    if not isinstance(document, Document):
        raise StorageError(f"{where} must be a Document, not {type(document).__name__}")
    _check_name(document.name, where)
    if document.kind not in KINDS:
        raise StorageError(f"{where}: kind must be one of {', '.join(KINDS)}, not {quoted(document.kind)}")
    text = document.text
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT_CHARS:
        raise StorageError(f"{where}: the text must be a string of at most {MAX_DOCUMENT_CHARS:,} characters, "
                           f"not {quoted(text)}")
    _check_storable(text, "text", where)
    if not isinstance(document.sha256, str) or not SHA256.fullmatch(document.sha256):
        raise StorageError(f"{where}: sha256 must be 64 lowercase hexadecimal digits, not {quoted(document.sha256)}")
    if not is_whole(document.size_bytes, 0, MAX_FILE_BYTES):
        raise StorageError(f"{where}: size_bytes must be a whole number from 0 to {MAX_FILE_BYTES:,}, "
                           f"not {quoted(document.size_bytes)}")
    _check_pages(document, where)
    _check_passages(document, where)


def _check_name(name: object, where: str) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise StorageError(f"{where}: the name must be text of 1 to {MAX_NAME_CHARS:,} characters, not {quoted(name)}")
    _check_storable(name, "name", where)


def _check_storable(text: str, field: str, where: str) -> None:
    """A lone surrogate (core.text) is not Unicode text and SQLite cannot store it."""
    index = lone_surrogate(text)
    if index is not None:
        raise StorageError(f'{where}: "{field}" holds an invalid character at {index} (half of a UTF-16 pair)')


def _check_pages(document: Document, where: str) -> None:
    """pages None with no page starts, or 1..MAX_PAGES pages with one start each, in order, inside the text."""
    pages, starts = document.pages, document.page_starts
    if not isinstance(starts, tuple):
        raise StorageError(f"{where}: page_starts must be a tuple, not {type(starts).__name__}")
    if pages is None:
        if starts:
            raise StorageError(f"{where}: page_starts must be empty for a document without pages")
        return
    if not is_whole(pages, 1, MAX_PAGES):
        raise StorageError(f"{where}: pages must be null or a whole number from 1 to {MAX_PAGES:,}, "
                           f"not {quoted(pages)}")
    if len(starts) != pages:
        raise StorageError(f"{where}: page_starts must hold one offset per page ({pages:,}), not {len(starts):,}")
    previous = 0
    for index, start in enumerate(starts):
        if not is_whole(start, previous, len(document.text)):
            raise StorageError(f"{where}: page_starts[{index}] must be a whole number from {previous:,} to "
                               f"{len(document.text):,} (in order, inside the text), not {quoted(start)}")
        previous = start


def _check_passages(document: Document, where: str) -> None:
    """Passages numbered 0.. in order, each the text between its start and end, together at most PASSAGE_OVERLAP
    times the text."""
    passages, text = document.passages, document.text
    if not isinstance(passages, tuple) or len(passages) > MAX_PASSAGES:
        raise StorageError(f"{where}: passages must be a tuple of at most {MAX_PASSAGES:,}, not {quoted(passages)}")
    total = 0
    for index, passage in enumerate(passages):
        at = f"{where}: passages[{index}]"
        if not isinstance(passage, Passage):
            raise StorageError(f"{at} must be a Passage, not {type(passage).__name__}")
        if passage.position != index:
            raise StorageError(f"{at}: position must be {index}, not {quoted(passage.position)}")
        if not (is_whole(passage.start, 0, len(text)) and is_whole(passage.end, passage.start, len(text))):
            raise StorageError(f"{at}: [{quoted(passage.start)}, {quoted(passage.end)}] is outside the text "
                               f"(length {len(text):,})")
        if passage.text != text[passage.start:passage.end]:
            raise StorageError(f"{at}: its text is not the document's text from {passage.start:,} to {passage.end:,}")
        if not (passage.page is None if document.pages is None else is_whole(passage.page, 1, document.pages)):
            raise StorageError(f"{at}: page must be {'null' if document.pages is None else 'from 1 to the pages'}, "
                               f"not {quoted(passage.page)}")
        total += passage.end - passage.start
    if total > PASSAGE_OVERLAP * max(len(text), 1):
        raise StorageError(f"{where}: the passages hold {total:,} characters, more than {PASSAGE_OVERLAP} times the "
                           f"text's {len(text):,}")


def is_whole(value: object, low: int, high: int) -> bool:
    """value is an int (not a bool) from low to high, both included."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
