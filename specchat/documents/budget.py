"""The bounds on reading one file, and the budget a read spends: its deadline, the user's Cancel and the progress it
reports. Every reader (the file itself, a PDF's pages, a DOCX's paragraphs, an HTML page's chunks) calls the same
`ReadBudget.step` between units of work, so Cancel and the time limit are heard the same way in each format.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..core.errors import DocumentError, ReadCancelled

MiB = 1 << 20


@dataclass(frozen=True)
class ReadLimits:
    """Every bound on reading one file; the defaults are far above what a desktop user attaches by accident.

    max_bytes: the file's size on disk; max_pages: a PDF's pages; max_chars: characters of extracted text;
    max_seconds: wall time for the whole read (checked between pages and chunks: one PDF page or the parse of a
    DOCX's XML is not interrupted); max_unpacked_bytes: what a DOCX's zip may inflate to, all members together;
    max_docx_xml_bytes: the DOCX's main XML part, which python-docx parses into memory at once (a crafted part of
    empty elements costs about 25 times its size in memory); max_zip_members: members of a DOCX's zip;
    max_zip_ratio: how many times a member larger than a MiB may inflate its compressed size (Word's XML stays
    under 20; a zip bomb is in the thousands)."""

    max_bytes: int = 64 * MiB
    max_pages: int = 2000
    max_chars: int = 4_000_000
    max_seconds: float = 120.0
    max_unpacked_bytes: int = 200 * MiB
    max_docx_xml_bytes: int = 32 * MiB
    max_zip_members: int = 2000
    max_zip_ratio: float = 100.0


class ReadBudget:
    """What one read may still spend: the deadline, the cancel event and the progress callback, with the file's
    shown name for the messages. `step(fraction)` is called between units of work; it raises ReadCancelled when the
    user pressed Cancel and DocumentError once the time is up, and otherwise reports progress (0..1)."""

    def __init__(self, name: str, limits: ReadLimits, cancel: threading.Event | None = None,
                 progress: Callable[[float], None] | None = None):
        self.name = name
        self.limits = limits
        self._cancel = cancel
        self._progress = progress
        self._started = time.monotonic()
        self._last_fraction = 0.0
        self._span = (0.0, 1.0)

    def within(self, start: float, end: float) -> None:
        """Maps the fractions later steps report onto [start, end] of the whole read (reading the file's bytes is
        its first part, extracting the text the rest)."""
        self._span = (start, end)

    def check(self) -> None:
        """Raises ReadCancelled when Cancel was pressed, DocumentError when the read ran past max_seconds."""
        if self._cancel is not None and self._cancel.is_set():
            raise ReadCancelled(f"Reading {self.name} was cancelled; nothing was attached.")
        elapsed = time.monotonic() - self._started
        if elapsed > self.limits.max_seconds:
            raise DocumentError(
                f"{self.name} took longer than {self.limits.max_seconds:g} s to read, so specchat stopped; "
                f"split it into smaller files and attach those.")

    def step(self, fraction: float) -> None:
        """Checks Cancel and the deadline, then reports `fraction` (0..1 of the current part, see `within`) to the
        progress callback as a fraction of the whole read, never going back."""
        self.check()
        start, end = self._span
        fraction = start + (end - start) * min(1.0, max(0.0, fraction))
        fraction = min(1.0, max(self._last_fraction, fraction))
        self._last_fraction = fraction
        if self._progress is not None:
            self._progress(fraction)

    def refuse_chars(self, count: int) -> None:
        """Raises DocumentError when `count` characters of text are more than max_chars."""
        if count > self.limits.max_chars:
            raise DocumentError(
                f"{self.name} holds more than {self.limits.max_chars:,} characters of text, more than specchat "
                f"reads from one file; split it into smaller files and attach those.")
