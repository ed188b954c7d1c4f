"""Small layout helpers shared by the window's panels."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget


def stacked(owner: QWidget, *widgets: QWidget, margins: tuple[int, int, int, int] = (0, 0, 0, 0),
           spacing: int = 0) -> QVBoxLayout:
    """`widgets` stacked top to bottom as `owner`'s layout, with `margins` (left, top, right, bottom) and `spacing`
    between them; returns the layout."""
    layout = QVBoxLayout(owner)
    layout.setContentsMargins(*margins)
    layout.setSpacing(spacing)
    for widget in widgets:
        layout.addWidget(widget)
    return layout
