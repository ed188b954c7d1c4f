"""Where a reply's drafted text was copied from: an accepted draft span whose text is in one of the chat's
documents says so when hovered ("from report.pdf, p. 3"). No Qt.

Prompt lookup copies tokens that already are in the prompt, so an accepted draft whose text occurs, word for word,
in an attached document was copied from it (or from a passage of it). The longest start of the span's text (at most
MATCH_CHARS) that a document holds is looked up, in the documents' order: a draft may run on past its source's end
("five years." where the document goes on "five years from"). A start too short to tell (MIN_CHARS) names no
source.

The transcript draws a chat anew at each send, edit and reply, and a reply's sources take a search of every
document for each of its drafts: KeptSources keeps them per reply, computed once, when the reply is first drawn
(or as it ends), and again only when what they came from changes (the reply continued, a document added or gone).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..core.vocabulary import DRAFT_ORIGIN
from .context_plan import ChatDocument
from .reply_spans import ReplySpans

MIN_CHARS = 12  # shorter drafts ("the ", ", and") occur everywhere: they name no source
MATCH_CHARS = 200  # of a long span, the start is looked up (a copy may run on past its source's end)
KEPT_REPLIES = 2000  # replies whose sources KeptSources keeps at most, the least recently drawn going first


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


class KeptSources:
    """Each reply's span_sources, kept by its message id with what they were computed from (its text, its stored
    spans and the chat's documents), so that drawing a chat again does not search its documents again: see the
    module's note. Plain data, no Qt; one per window's Conversations, shared by the chats it opens."""

    def __init__(self, keep: int = KEPT_REPLIES):
        self._keep = keep
        self._kept: dict[int, tuple[str, Any, tuple, dict[tuple[int, int], str]]] = {}

    def of(self, message_id: int, reply: str, stored_spans, documents: Sequence[ChatDocument]) \
            -> dict[tuple[int, int], str]:
        """The sources of reply `message_id`'s accepted drafts (span_sources of `reply`, its spans as stored,
        `stored_spans`, among `documents`): kept ones when the reply, its spans and the documents are those they
        were computed from, else computed now and kept."""
        held = tuple((d.document_id, d.document.sha256) for d in documents)
        kept = self._kept.pop(message_id, None)
        if kept is None or kept[0] != reply or kept[1] != stored_spans or kept[2] != held:
            kept = (reply, stored_spans, held, span_sources(reply, ReplySpans.from_json(stored_spans), documents))
        self._kept[message_id] = kept  # the most recently drawn last: the oldest go first
        if len(self._kept) > self._keep:
            self._kept.pop(next(iter(self._kept)))
        return dict(kept[3])
