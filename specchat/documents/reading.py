"""A user's file read into a Document, treating every byte as hostile: the window's attach button, the CLI, the
server and storage call `read_document` (a file) or `document_from_text` (pasted text, an API request's).

The file is opened with care: its path resolved, anything but a regular file (a folder, a device, a pipe, a link to
one) refused before it is opened, so nothing blocks; opened without following a link planted since, and checked to
be the file that was looked at; read in chunks within max_bytes; and checked after the read to be still there and
unchanged. Cancel, the deadline and progress are heard between chunks and pages (budget.py); the formats are read
by formats.py (text, Markdown, code, HTML), pdf_text.py and docx_text.py; passages.py cuts the text.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from pathlib import Path
from typing import Callable

from ..core.errors import DocumentError, ReadCancelled
from ..core.text import lone_surrogate
from .budget import MiB, ReadBudget, ReadLimits
from .docx_text import read_docx
from .formats import clean_text, kind_of, read_html, read_text
from .document import KINDS, Document
from .passages import split_passages
from .pdf_text import read_pdf

__all__ = ["ReadCancelled", "ReadLimits", "document_from_bytes", "document_from_text", "read_document", "shown_name",
           "split_passages"]

READ_SHARE = 0.2  # of the progress bar: reading the file's bytes; extracting the text is the rest
_CHUNK = 1 << 20  # bytes read between two checks of Cancel and the deadline
_NAME_LIMIT = 120  # characters of a file's name that a message or a chip shows
_UNSHOWABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))


def read_document(path: Path, limits: ReadLimits = ReadLimits(), cancel: threading.Event | None = None,
                  progress: Callable[[float], None] | None = None) -> Document:
    """The file at `path` read into a Document: its kind by its extension, its text, pages and page starts (a
    PDF's), its hash and size as read, and its passages. `cancel` (set by the user's Cancel) is checked between
    chunks and pages, and raises ReadCancelled; `progress` gets the fraction done (0..1), from the caller's thread.
    Every failure is a DocumentError whose one line names the file and says what to do."""
    name = shown_name(Path(path).name)
    budget = ReadBudget(name, limits, cancel, progress)
    kind = kind_of(Path(path).name)  # by the real name: a shown name cut short has lost its extension
    budget.step(0.0)
    budget.within(0.0, READ_SHARE)
    data = _read_file(Path(path), budget)
    budget.within(READ_SHARE, 1.0)
    return _document_of(kind, data, budget)


def document_from_bytes(name: str, data: bytes, limits: ReadLimits = ReadLimits(),
                        cancel: threading.Event | None = None) -> Document:
    """A file's bytes already in memory (a request to `specchat serve` carries them, base64) read as read_document
    reads a file named `name`: its kind by the extension, within the same limits (its size against max_bytes),
    hearing `cancel` and the deadline the same way. DocumentError, naming the file, as read_document's."""
    shown = shown_name(name)
    budget = ReadBudget(shown, limits, cancel)
    kind = kind_of(name)
    _refuse_size(len(data), budget)
    budget.within(READ_SHARE, 1.0)
    return _document_of(kind, data, budget)


def _document_of(kind: str, data: bytes, budget: ReadBudget) -> Document:
    """The Document of a file's bytes read as `kind`, with its hash, size and passages; DocumentError when it has no
    text."""
    text, page_starts = _extract(kind, data, budget)
    if not text.strip():
        raise DocumentError(f"{budget.name} has no text to read; attach a file with text in it.")
    document = Document(name=budget.name, kind=kind, text=text, pages=len(page_starts) or None,
                        page_starts=page_starts, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data),
                        passages=split_passages(text, page_starts))
    budget.step(1.0)
    return document


def document_from_text(name: str, text: str, kind: str = "text") -> Document:
    """Pasted text, or an API request's, made a Document named `name` of `kind` (one of KINDS), without pages; its
    hash and size are of the text in UTF-8. Raises DocumentError for an unknown kind, a lone surrogate (not text:
    nothing downstream can store or tokenize it), a blank text or one over ReadLimits' max_chars."""
    shown = shown_name(name)
    if kind not in KINDS:
        raise DocumentError(f"{shown}: {kind!r} is not a kind of document specchat knows (one of {', '.join(KINDS)}).")
    surrogate_at = lone_surrogate(text)
    if surrogate_at is not None:
        raise DocumentError(f"{shown} holds a lone surrogate (U+{ord(text[surrogate_at]):04X}) at character "
                            f"{surrogate_at:,}, which is not a character; remove it and try again.")
    text = clean_text(text)
    ReadBudget(shown, ReadLimits()).refuse_chars(len(text))
    if not text.strip():
        raise DocumentError(f"{shown} has no text; paste some text to attach.")
    encoded = text.encode("utf-8")
    return Document(name=shown, kind=kind, text=text, pages=None, page_starts=(),
                    sha256=hashlib.sha256(encoded).hexdigest(), size_bytes=len(encoded),
                    passages=split_passages(text))


def shown_name(name: str) -> str:
    """A file's name as a message or a chip shows it: control characters, line separators and undecodable bytes
    (lone surrogates) as "?", cut to 120 characters with "…", so a hostile name stays on one short line."""
    name = _UNSHOWABLE.sub("?", name) or "(unnamed)"
    return name if len(name) <= _NAME_LIMIT else name[:_NAME_LIMIT - 1] + "…"


def _extract(kind: str, data: bytes, budget: ReadBudget) -> tuple[str, tuple[int, ...]]:
    """The text of `data` read as `kind`, and its page starts (a PDF's; empty otherwise)."""
    try:
        if kind == "pdf":
            return read_pdf(data, budget)
        if kind == "docx":
            return read_docx(data, budget), ()
        if kind == "html":
            return read_html(data, budget), ()
        return read_text(data, budget), ()
    except (MemoryError, RecursionError):
        raise DocumentError(f"{budget.name} is too large or too deeply nested to read in memory; split it into "
                            f"smaller files and attach those.") from None


# --- the file itself ------------------------------------------------------------------------------------------------

def _read_file(path: Path, budget: ReadBudget) -> bytes:
    """The bytes of the regular file at `path`, read in chunks within max_bytes (read_document's module says how it
    is opened and checked); DocumentError when it is missing, not a regular file, empty, too large, unreadable, or
    vanished or changed while read."""
    name = budget.name
    resolved, looked_at = _regular_file(path, name)
    _refuse_size(looked_at.st_size, budget)
    try:
        descriptor = os.open(resolved, _OPEN_FLAGS)
    except FileNotFoundError:
        raise _vanished(name) from None
    except OSError as error:
        raise DocumentError(f"{name} cannot be opened ({error.strerror or error}).") from None
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode) or _identity(opened) != _identity(looked_at):
            raise _changed(name)
        data = _read_bounded(descriptor, opened.st_size, budget)
        after = os.fstat(descriptor)
    except OSError as error:
        raise DocumentError(f"{name} could not be read ({error.strerror or error}).") from None
    finally:
        os.close(descriptor)
    if len(data) != opened.st_size or after.st_size != opened.st_size or after.st_mtime_ns != opened.st_mtime_ns:
        raise _changed(name)
    try:
        now = os.stat(resolved)
    except FileNotFoundError:
        raise _vanished(name) from None
    except OSError as error:
        raise DocumentError(f"{name} could not be checked after reading ({error.strerror or error}).") from None
    if _identity(now) != _identity(opened):
        raise _vanished(name)
    return data


def _refuse_size(size: int, budget: ReadBudget) -> None:
    """DocumentError for a file of `size` bytes that is empty or larger than max_bytes."""
    if size > budget.limits.max_bytes:
        raise DocumentError(f"{budget.name} is {size / MiB:,.0f} MiB, more than the "
                            f"{budget.limits.max_bytes / MiB:,.0f} MiB specchat reads from one file; attach a smaller "
                            f"file.")
    if size == 0:
        raise DocumentError(f"{budget.name} is empty; attach a file with text in it.")


def _regular_file(path: Path, name: str) -> tuple[Path, os.stat_result]:
    """`path` with its links resolved, and its stat; DocumentError when it is missing, unreachable or anything but a
    regular file (a folder, a device, a pipe, a socket): such a file is refused before it is opened."""
    try:
        resolved = path.resolve(strict=True)
        looked_at = os.stat(resolved)
    except FileNotFoundError:
        raise DocumentError(f"{name} was not found; it may have been moved or deleted.") from None
    except OSError as error:  # permission denied, a loop of links, a name too long
        raise DocumentError(f"{name} cannot be opened ({error.strerror or error}).") from None
    if not stat.S_ISREG(looked_at.st_mode):
        raise DocumentError(f"{name} is {_what_it_is(looked_at.st_mode)}, not a regular file; specchat attaches "
                            f"files only.")
    return resolved, looked_at


def _what_it_is(mode: int) -> str:
    """What a file that is not regular is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device (or a link to one)"
    if stat.S_ISFIFO(mode):
        return "a pipe (or a link to one)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _read_bounded(descriptor: int, expected: int, budget: ReadBudget) -> bytes:
    """Up to max_bytes of the open file, read a chunk at a time with a budget step after each; DocumentError when
    the file has grown past max_bytes meanwhile."""
    limit = budget.limits.max_bytes
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(descriptor, min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _changed(budget.name)
        budget.step(total / max(1, expected))


def _identity(status: os.stat_result) -> tuple[int, int]:
    """The device and inode that name one file, whatever its path."""
    return status.st_dev, status.st_ino


def _vanished(name: str) -> DocumentError:
    """The error for a file that is gone (or another file in its place) after it was read."""
    return DocumentError(f"{name} was moved, replaced or deleted while specchat read it; attach it again.")


def _changed(name: str) -> DocumentError:
    """The error for a file whose size or time changed while it was read."""
    return DocumentError(f"{name} changed while specchat read it (is it still being written?); wait until it is "
                         f"saved and attach it again.")
