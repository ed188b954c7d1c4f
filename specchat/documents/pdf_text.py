"""A PDF's text, page by page, through pypdfium2 (PDFium, Chrome's PDF library): fast, kept up to date, and its
ctypes calls release the GIL, so the window stays responsive while a long PDF is read on a worker thread.

PDFium is not thread-safe, so one lock serializes every use of it in this process (a second file waits, hearing
Cancel while it waits). No JavaScript runs (no form environment is made) and nothing is fetched.
"""

from __future__ import annotations

import threading

import pypdfium2
import pypdfium2.raw as pdfium_c

from ..core.errors import DocumentError, first_line
from .budget import ReadBudget
from .formats import clean_text

PAGE_SEPARATOR = "\n\n"  # between two pages' text: a paragraph break, so no passage runs words of two pages together
_PDFIUM_LOCK = threading.Lock()
_LOCK_POLL_SECONDS = 0.1


def read_pdf(data: bytes, budget: ReadBudget) -> tuple[str, tuple[int, ...]]:
    """The text of the PDF in `data` and where each page starts in it (one offset per page, the first 0). Checks
    Cancel and the deadline between pages and reports progress by pages; raises DocumentError for an encrypted,
    damaged or empty PDF, one with more than max_pages pages or max_chars characters, and one with no text layer
    (a scan)."""
    while not _PDFIUM_LOCK.acquire(timeout=_LOCK_POLL_SECONDS):
        budget.check()
    try:
        pdf = _open_pdf(data, budget.name)
        try:
            return _pages_text(pdf, budget)
        finally:
            pdf.close()
    finally:
        _PDFIUM_LOCK.release()


def _open_pdf(data: bytes, name: str) -> pypdfium2.PdfDocument:
    """The PDF opened from memory without a password; DocumentError when it needs one or is not a PDF PDFium can
    read."""
    try:
        return pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as error:
        if error.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise DocumentError(
                f"{name} is encrypted: specchat cannot read a password-protected PDF; save a copy without the "
                f"password and attach that.") from None
        raise DocumentError(f"{name} is damaged or not a PDF ({first_line(error)}); open it in a PDF viewer, "
                            f"save a new copy and attach that.") from None


def _pages_text(pdf: pypdfium2.PdfDocument, budget: ReadBudget) -> tuple[str, tuple[int, ...]]:
    """Each page's text joined by PAGE_SEPARATOR, with the page starts (read_pdf says what it checks)."""
    name, limits = budget.name, budget.limits
    page_count = len(pdf)
    if page_count == 0:
        raise DocumentError(f"{name} has no pages; attach a PDF with text.")
    if page_count > limits.max_pages:
        raise DocumentError(f"{name} has {page_count:,} pages, more than the {limits.max_pages:,} specchat reads "
                            f"from one file; split it and attach the part you need.")
    pieces: list[str] = []
    page_starts: list[int] = []
    length = 0
    for index in range(page_count):
        budget.step(index / page_count)
        page_text = clean_text(_page_text(pdf, index, name))
        if index:
            pieces.append(PAGE_SEPARATOR)
            length += len(PAGE_SEPARATOR)
        page_starts.append(length)
        pieces.append(page_text)
        length += len(page_text)
        budget.refuse_chars(length)
    text = "".join(pieces)
    if not text.strip():
        raise DocumentError(
            f"{name} has no text layer (its {page_count:,} page{'s' if page_count != 1 else ''} look scanned: "
            f"images of text); specchat does not read text from images, so run it through OCR (for example "
            f"ocrmypdf) and attach the result.")
    return text, tuple(page_starts)


def _page_text(pdf: pypdfium2.PdfDocument, index: int, name: str) -> str:
    """The text of page `index` (0-based) as PDFium extracts it; DocumentError when the page cannot be loaded."""
    try:
        page = pdf[index]
    except pypdfium2.PdfiumError as error:
        raise DocumentError(f"{name} is damaged: page {index + 1} cannot be read ({first_line(error)}); save a "
                            f"new copy from a PDF viewer and attach that.") from None
    try:
        text_page = page.get_textpage()
        try:
            return text_page.get_text_range()
        finally:
            text_page.close()
    except pypdfium2.PdfiumError as error:
        raise DocumentError(f"{name} is damaged: the text of page {index + 1} cannot be read "
                            f"({first_line(error)}); save a new copy from a PDF viewer and attach that.") from None
    finally:
        page.close()
