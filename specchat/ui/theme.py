"""Colours that follow the system palette (light or dark)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QGuiApplication, QPalette


@dataclass(frozen=True)
class Theme:
    dark: bool
    draft_background: QColor  # accepted draft tokens
    rejected_text: QColor
    muted_text: QColor
    user_bubble: QColor
    code_background: QColor
    accent: QColor


def current_theme() -> Theme:
    palette = QGuiApplication.palette()
    dark = palette.color(QPalette.ColorRole.Window).lightness() < 128
    if dark:
        return Theme(True, QColor("#1f4d33"), QColor("#8a8f98"), QColor("#9aa0a6"), QColor("#2b2f36"),
                     QColor("#1e2227"), QColor("#6fbf8a"))
    return Theme(False, QColor("#d4f2dd"), QColor("#9aa0a6"), QColor("#6b7280"), QColor("#eef1f5"),
                 QColor("#f4f5f7"), QColor("#2e8b57"))


def dark_palette() -> QPalette:
    """A dark palette for platforms whose style has none (used when the system asks for dark mode)."""
    palette = QPalette()
    colours = {
        QPalette.ColorRole.Window: "#202124", QPalette.ColorRole.WindowText: "#e8eaed",
        QPalette.ColorRole.Base: "#17181a", QPalette.ColorRole.AlternateBase: "#26282c",
        QPalette.ColorRole.Text: "#e8eaed", QPalette.ColorRole.Button: "#2b2d31",
        QPalette.ColorRole.ButtonText: "#e8eaed", QPalette.ColorRole.Highlight: "#3b6ea8",
        QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: "#2b2d31",
        QPalette.ColorRole.ToolTipText: "#e8eaed", QPalette.ColorRole.PlaceholderText: "#8a8f98",
        QPalette.ColorRole.Link: "#8ab4f8",
    }
    for role, colour in colours.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText, QPalette.ColorRole.Text):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b6f76"))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Button, QColor("#242629"))
    return palette
