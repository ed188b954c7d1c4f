"""Text from outside the app (a remote server's model ids and messages, a Hub's errors, model names read from
files) shown as text, never as markup.

A QLabel's default text format, AutoText, renders anything that looks like HTML as rich text: a remote model id of
`<img src="http://...">` would load an image, a link would become clickable. A tooltip is treated the same way.
plain_label() sets a label to PlainText; plain_tip() turns a tooltip's text into rich text that shows it verbatim.
ElidedLabel is a plain-text label for a crowded row (the status bar), cut with "…" where its row is short.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


def plain_label(label: QLabel) -> QLabel:
    """The label, set to show its text as plain text (returned, for use in an expression)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_tip(text: str) -> str:
    """A tooltip that shows `text` as it is (escaped, its line breaks kept), whatever it contains."""
    return Qt.convertFromPlainText(text, Qt.WhiteSpaceMode.WhiteSpaceNormal) if text else ""


class ElidedLabel(QLabel):
    """A one-line plain-text label that gives way: it asks for its whole text's width but settles for
    `minimum_width`, showing as much of the text as fits with "…" at the end, and the whole text in its tooltip.
    In a row of labels (the status bar at its default 1100 px held a model's description and a chat's figures that
    ran into each other, issue 37) none can then overlap another: the layout shrinks them instead."""

    def __init__(self, minimum_width: int = 80, parent=None):
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self._full = ""
        self._minimum_width = minimum_width

    def set_full_text(self, text: str) -> None:
        """Shows `text`, cut to the label's width; the tooltip holds all of it when it is cut."""
        self._full = text
        self.updateGeometry()
        self._fit()

    def full_text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:
        """The whole text's size: what the label would like."""
        margins, metrics = self.contentsMargins(), self.fontMetrics()
        return QSize(metrics.horizontalAdvance(self._full) + margins.left() + margins.right() + 2,
                     metrics.height() + margins.top() + margins.bottom())

    def minimumSizeHint(self) -> QSize:
        hint = self.sizeHint()
        return QSize(min(self._minimum_width, hint.width()), hint.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.contentsRect().width())
        self.setText(shown)
        self.setToolTip(plain_tip(self._full) if shown != self._full else "")
