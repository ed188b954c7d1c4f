"""The main window's banner: errors and notes above the transcript. (The reply being streamed is the reply
controller's state, chats/reply_controller.py.)"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

MAX_SHOWN_CHARS = 2000  # a message longer than this is cut: laying out a megabyte in a label froze the window
STYLES = {  # kind: (icon, frame background, border, text colour)
    "error": ("⚠", "#fdecea", "#f5c2c0", "#7a1c16"),
    "info": ("ℹ", "#eaf2fb", "#c4d9f0", "#1d3b5c"),
}


class ErrorBanner(QFrame):
    """A dismissable message above the transcript: an error (red, a warning sign) saying what went wrong and what
    to do, or a note (calm blue, an information sign) saying what the user should know, such as what a loaded
    model's replies promise. `kind` is the one shown."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.kind = "error"
        self.icon = QLabel()
        self.label = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse,
                            textFormat=Qt.TextFormat.PlainText)  # messages carry servers' and files' text
        close = QPushButton("Dismiss")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.icon)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self._set_kind("error")
        self.hide()

    def show_message(self, message: str) -> None:
        """Shows `message` as an error."""
        self._show("error", message)

    def show_note(self, message: str) -> None:
        """Shows `message` as information, unless an error is on show: a note never hides an error."""
        if self.isVisible() and self.kind == "error":
            return
        self._show("info", message)

    def _show(self, kind: str, message: str) -> None:
        if len(message) > MAX_SHOWN_CHARS:
            message = f"{message[:MAX_SHOWN_CHARS]}… (cut: the message has {len(message):,} characters)"
        self._set_kind(kind)
        self.label.setText(message)
        self.show()

    def _set_kind(self, kind: str) -> None:
        icon, background, border, text = STYLES[kind]
        self.kind = kind
        self.icon.setText(icon)
        self.setStyleSheet(f"#errorBanner {{ background: {background}; border: 1px solid {border}; "
                           f"border-radius: 6px; }} #errorBanner QLabel {{ color: {text}; }}")
