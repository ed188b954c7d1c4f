"""Text from outside the app (a remote server's model ids and messages, a Hub's errors, model names read from
files) shown as text, never as markup.

A QLabel's default text format, AutoText, renders anything that looks like HTML as rich text: a remote model id of
`<img src="http://...">` would load an image, a link would become clickable. A tooltip is treated the same way.
plain_label() sets a label to PlainText; plain_tip() turns a tooltip's text into rich text that shows it verbatim.
"""

from __future__ import annotations

from PySide6.QtGui import Qt
from PySide6.QtWidgets import QLabel


def plain_label(label: QLabel) -> QLabel:
    """The label, set to show its text as plain text (returned, for use in an expression)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_tip(text: str) -> str:
    """A tooltip that shows `text` as it is (escaped, its line breaks kept), whatever it contains."""
    return Qt.convertFromPlainText(text, Qt.WhiteSpaceMode.WhiteSpaceNormal) if text else ""
