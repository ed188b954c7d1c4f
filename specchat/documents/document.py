"""The plain values of a document, shared by reading, storage, the prompt and the window: one definition each.

A document is the text extracted from one attached file, its pages (where the format has them) and its passages:
runs of about a paragraph or two, cut at paragraph or sentence ends, which retrieval ranks and the prompt quotes
when the whole text does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("text", "markdown", "code", "pdf", "docx", "html")


@dataclass(frozen=True)
class Passage:
    """One passage of a document: its place in the document's order (0-based), the 1-based page it starts on
    (None for a format without pages), and its character range [start, end) in the document's text."""

    position: int
    page: int | None
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Document:
    """A file read into text.

    name: the file's base name, shown on the chip; kind: one of KINDS; text: the extracted text; pages: the page
    count (None for a format without pages); page_starts: the character offset in `text` where each page starts
    (empty without pages); sha256 and size_bytes: of the file as read; passages: the text cut for retrieval, in
    order, covering the text."""

    name: str
    kind: str
    text: str
    pages: int | None
    page_starts: tuple[int, ...]
    sha256: str
    size_bytes: int
    passages: tuple[Passage, ...]

    def page_at(self, offset: int) -> int | None:
        """The 1-based page holding character `offset` of the text, or None without pages."""
        if not self.page_starts:
            return None
        page = 0
        for index, start in enumerate(self.page_starts):
            if start <= offset:
                page = index
            else:
                break
        return page + 1
