"""The message box: Enter sends, Shift+Enter starts a new line; files pasted or dropped into it are attached."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QUrl, Signal
from PySide6.QtWidgets import QPlainTextEdit

MAX_FILES_AT_ONCE = 20  # files one message takes; more in one drop are refused, and the tray says how many
MAX_DROPPED_URLS = 100_000  # a drop naming more is hostile or broken: it is neither attached nor pasted
MAX_PATH_CHARS = 4096  # a pasted text longer than this is text, not a path (PATH_MAX on Linux)


def dropped_files(mime: QMimeData) -> list[str]:
    """The local files named by `mime`'s URLs (a file manager's drag or copy), all of them: the window attaches what
    a message takes and says how many it left (Attachments.attach_files), rather than pasting 21 paths as text. []
    when it names none, anything that is not a local file (a web link is pasted as text), or more than
    MAX_DROPPED_URLS."""
    if not mime.hasUrls():
        return []
    urls = mime.urls()
    if not urls or len(urls) > MAX_DROPPED_URLS or not all(url.isLocalFile() for url in urls):
        return []
    return [url.toLocalFile() for url in urls]


def pasted_path(text: str) -> str | None:
    """The file a pasted `text` names, when the text is one path (or file: URL) of an existing regular file, in
    quotes or not; None for any other text, which is pasted as it is. Looks at the file system only for a short,
    single-line text."""
    text = text.strip()
    if not text or len(text) > MAX_PATH_CHARS or "\n" in text or "\x00" in text:
        return None
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if text.startswith("file:"):
        text = QUrl(text).toLocalFile()
    path = Path(os.path.expanduser(text))
    try:
        return str(path) if path.is_absolute() and path.is_file() else None
    except (OSError, ValueError):  # a name too long for the file system, or unreadable: it is text
        return None


class Composer(QPlainTextEdit):
    """The message box. `submitted`: Enter. `files_given`: files pasted or dropped into it (a file manager's
    files, or a pasted text that is one existing file's path), to attach instead of pasting their names."""

    submitted = Signal()
    files_given = Signal(list)  # their paths, as str

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPlaceholderText("Message the model…  (Enter sends, Shift+Enter adds a line)")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(110)
        self.setMinimumHeight(56)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(dropped_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        """A paste or a drop: files are attached (files_given), any other text is inserted."""
        files = dropped_files(source)
        if not files and source.hasText():
            path = pasted_path(source.text())
            files = [path] if path is not None else []
        if files:
            self.files_given.emit(files)
            return
        super().insertFromMimeData(source)
