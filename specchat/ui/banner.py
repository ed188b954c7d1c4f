"""Small pieces of the main window's state and chrome: the error banner, and the reply being streamed."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from ..chats import RecordedReply
from .workers import GenerationWorker


class ErrorBanner(QFrame):
    """A dismissable message above the transcript saying what went wrong and what to do."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("errorBanner")
        self.setStyleSheet("#errorBanner { background: #fdecea; border: 1px solid #f5c2c0; border-radius: 6px; }"
                           "#errorBanner QLabel { color: #7a1c16; }")
        self.label = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse,
                            textFormat=Qt.TextFormat.PlainText)  # messages carry servers' and files' text
        close = QPushButton("Dismiss")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(QLabel("⚠"))
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.hide()

    def show_message(self, message: str) -> None:
        self.label.setText(message)
        self.show()


@dataclass
class ActiveReply:
    """The reply the window is streaming: where it is stored (ReplyRecorder.begin's RecordedReply), how to stop it,
    and what the window knows of it."""

    rows: RecordedReply
    cancel: threading.Event
    worker: GenerationWorker
    started: float
    last_saved: float = 0.0
    save_failed: bool = False  # a partial save failed: said once, retried at the next save time
    note: str = ""  # what the user should know about this reply's prompt (oldest messages left out)

    @property
    def conversation_id(self) -> int:
        return self.rows.conversation_id

    @property
    def message_id(self) -> int:
        return self.rows.message_id
