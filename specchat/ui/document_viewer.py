"""A read-only view of an attached document's text (or of one passage a reply was given), with a find box.

The text is the user's file's, so it is shown as plain text only, in a QPlainTextEdit (which lays out a long text
lazily, block by block); the name is a plain-text label. The dialog is not modal: the chat stays usable beside it.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor, QTextDocument
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout

from .plain import plain_label


class DocumentViewer(QDialog):
    """Shows `text` under a title line (`title`: the document's name, or a passage's source) and a line of
    `details` (its kind, pages, size). Find (Ctrl+F, Enter for the next match, Shift+Enter for the one before)
    selects the matches in turn, wrapping at the ends; `found` says how it went."""

    def __init__(self, title: str, details: str, text: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(760, 620)
        heading = plain_label(QLabel(title))
        heading.setStyleSheet("font-weight: 600; font-size: 12pt;")
        heading.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details = plain_label(QLabel(details))
        self.text = QPlainTextEdit(readOnly=True)
        self.text.setPlainText(text)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.find_box = QLineEdit(placeholderText="Find in the document…", clearButtonEnabled=True)
        self.find_box.returnPressed.connect(self.find_next)
        self.found = plain_label(QLabel(""))
        previous = QPushButton("Previous")
        previous.clicked.connect(lambda: self.find_next(backward=True))
        following = QPushButton("Next")
        following.clicked.connect(self.find_next)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        for button in (previous, following, close):
            button.setAutoDefault(False)  # Enter in the find box finds; it presses no button
        find_row = QHBoxLayout()
        find_row.addWidget(self.find_box, 1)
        find_row.addWidget(previous)
        find_row.addWidget(following)
        find_row.addWidget(self.found)
        find_row.addStretch(0)
        find_row.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(heading)
        layout.addWidget(self.details)
        layout.addLayout(find_row)
        layout.addWidget(self.text, 1)
        QShortcut(QKeySequence.StandardKey.Find, self, activated=self.find_box.setFocus)
        QShortcut(QKeySequence("Shift+Return"), self.find_box, activated=lambda: self.find_next(backward=True))
        self.find_box.setFocus()

    def find_next(self, backward: bool = False) -> bool:
        """Selects the next match of the find box's text after the selection (before it, `backward`), wrapping
        around once; whether one was found. Case-insensitive, as a find box is expected to be."""
        needle = self.find_box.text()
        if not needle:
            self.found.setText("")
            return False
        flags = QTextDocument.FindFlag.FindBackward if backward else QTextDocument.FindFlag(0)
        if not self.text.find(needle, flags):
            cursor = self.text.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End if backward else QTextCursor.MoveOperation.Start)
            self.text.setTextCursor(cursor)
            if not self.text.find(needle, flags):
                self.found.setText("Not found")
                return False
        self.found.setText("")
        return True

    def selected_text(self) -> str:
        """The text the last find selected (for tests)."""
        return self.text.textCursor().selectedText()
