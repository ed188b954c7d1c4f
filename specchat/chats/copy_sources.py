"""Where a reply's drafted text was copied from: an accepted draft span whose text is in one of the chat's
documents says so when hovered ("from report.pdf, p. 3"). No Qt.

Prompt lookup copies tokens that already are in the prompt, so an accepted draft whose text occurs, word for word,
in an attached document was copied from it (or from a passage of it). The longest start of the span's text (at most
MATCH_CHARS) that a document holds is looked up, in the documents' order: a draft may run on past its source's end
("five years." where the document goes on "five years from"). A start too short to tell (MIN_CHARS) names no
source.
"""

from __future__ import annotations

from typing import Sequence

from ..core.vocabulary import DRAFT_ORIGIN
from .context_plan import ChatDocument
from .reply_spans import ReplySpans

MIN_CHARS = 12  # shorter drafts ("the ", ", and") occur everywhere: they name no source
MATCH_CHARS = 200  # of a long span, the start is looked up (a copy may run on past its source's end)


def copied_from(text: str, documents: Sequence[ChatDocument]) -> str | None:
    """The source of `text` among `documents`: "report.pdf, p. 3" (or "report.txt"), None when none holds it."""
    needle = text.strip()[:MATCH_CHARS]
    if len(needle) < MIN_CHARS:
        return None
    for chat_document in documents:
        document = chat_document.document
        offset = _longest_start(document.text, needle)
        if offset >= 0:
            page = document.page_at(offset)
            return f"from {document.name}" + (f", p. {page}" if page is not None else "")
    return None


def _longest_start(haystack: str, needle: str) -> int:
    """Where `haystack` holds the longest start of `needle` of at least MIN_CHARS characters (-1: none). A start
    that occurs means every shorter one does, so the length is found by bisection: a few finds, not one a length."""
    low, high, found = MIN_CHARS, len(needle), -1
    while low <= high:
        middle = (low + high) // 2
        offset = haystack.find(needle[:middle])
        if offset >= 0:
            found, low = offset, middle + 1
        else:
            high = middle - 1
    return found


def span_sources(reply: str, spans: ReplySpans, documents: Sequence[ChatDocument]) -> dict[tuple[int, int], str]:
    """For each accepted draft span (start, end) of the reply text `reply` that a document holds, where it came
    from ("from report.pdf, p. 3")."""
    if not documents:
        return {}
    found = {}
    for start, end, origin in spans.spans:
        if origin == DRAFT_ORIGIN:
            source = copied_from(reply[start:end], documents)
            if source is not None:
                found[(start, end)] = source
    return found
