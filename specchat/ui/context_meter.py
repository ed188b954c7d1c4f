"""The context meter under the composer: what the next send will read against the model's context window.

A thin bar in segments (system prompt, documents, the chat's earlier turns, the message being typed), the reply's
room at its right end, the plan's summary line ("1,204 / 8,192 tokens · system 20 · documents 900 · ..."), and,
in an alert colour, what a send will leave out or read only in part. Its figures are those of the plan the reply
itself is built from (chats/context_plan.py), so the meter says exactly what a send will do. It is refreshed at
most once per DEBOUNCE_MS while the user types, and at once when the chips, the chat or the model change; hidden
without a local model (a remote engine fits its prompt itself).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from ..chats.context_plan import ContextMeter
from .layouts import stacked
from .plain import plain_label, plain_tip
from .theme import current_theme

DEBOUNCE_MS = 150  # typing refreshes the meter once this long after the last key
ALERT = "#b3261e"  # the warning's colour: something will be left out
# The segments, in the bar's order: (the meter's field, its name in the legend, its colour)
SEGMENTS = (("system", "system prompt", "#8e99ab"), ("documents", "documents", "#d08b2c"),
            ("chat", "earlier messages", "#4a7fc1"), ("message", "your message", "#2e8b57"))


class MeterBar(QWidget):
    """The segmented bar: each part's share of the window, in SEGMENTS' colours, and the room kept for the reply,
    hatched, at the right end. A part too small to see still gets a pixel."""

    HEIGHT = 7

    def __init__(self, parent=None):
        super().__init__(parent)
        self.meter: ContextMeter | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(200, self.HEIGHT)

    def set_meter(self, meter: ContextMeter | None) -> None:
        self.meter = meter
        self.setToolTip(legend(meter) if meter is not None else "")
        self.update()

    def segments(self, width: float) -> list[tuple[str, float, float]]:
        """The bar's painted parts for a bar `width` pixels wide: (field, x, width), the reply's room last ("reply");
        parts past the window are cut at its end."""
        meter = self.meter
        if meter is None or meter.window <= 0:
            return []
        scale = width / meter.window
        parts, x = [], 0.0
        for field, _, _ in SEGMENTS:
            tokens = getattr(meter, field)
            if tokens > 0 and x < width:
                part = min(max(tokens * scale, 1.0), width - x)
                parts.append((field, x, part))
                x += part
        reply = min(meter.reply * scale, width)
        if reply > 0:
            parts.append(("reply", width - reply, reply))
        return parts

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        track = self.palette().color(QPalette.ColorRole.Mid)
        track.setAlpha(70)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(track)
        painter.drawRoundedRect(QRectF(self.rect()), 3, 3)
        colours = {field: QColor(colour) for field, _, colour in SEGMENTS}
        for field, x, width in self.segments(float(self.width())):
            if field == "reply":
                painter.setBrush(QBrush(current_theme().muted_text, Qt.BrushStyle.BDiagPattern))
            else:
                painter.setBrush(colours[field])
            painter.drawRect(QRectF(x, 0, width, self.height()))
        painter.end()


# what a part holds beyond what its name says: a chip counts a document's text, the meter what the prompt holds
NOTES = {"documents": " (their text, each inside the label that names it for the model)"}


def legend(meter: ContextMeter) -> str:
    """The bar's tooltip: each colour's part and its tokens, and the reply's room."""
    rows = [f"<span style='color:{colour}'>■</span> {name}: {getattr(meter, field):,} tokens{NOTES.get(field, '')}"
            for field, name, colour in SEGMENTS]
    rows.append(f"▨ kept for the reply: {meter.reply:,} tokens")
    return (f"What the next message reads of the model's {meter.window:,}-token context window:<br>"
            + "<br>".join(rows))


class ContextMeterPanel(QWidget):
    """The bar, the summary line and the warning line. `measure` gives the meter of the next send (None: no local
    model, and the panel hides); schedule() refreshes it after DEBOUNCE_MS, refresh() at once."""

    def __init__(self, measure: Callable[[], ContextMeter | None], parent=None):
        super().__init__(parent)
        self._measure = measure
        self.meter: ContextMeter | None = None
        self.bar = MeterBar()
        self.summary = plain_label(QLabel())
        self.warning = plain_label(QLabel(wordWrap=True))
        self.warning.setStyleSheet(f"color: {ALERT};")
        small = self.font()
        small.setPointSizeF(max(small.pointSizeF() - 1, 7))
        for label in (self.summary, self.warning):
            label.setFont(small)
        self.summary.setStyleSheet(f"color: {current_theme().muted_text.name()};")
        stacked(self, self.bar, self.summary, self.warning, margins=(0, 2, 0, 0), spacing=2)
        self._timer = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self._timer.timeout.connect(self.refresh)
        self.warning.hide()
        self.hide()

    def schedule(self) -> None:
        """Refreshes the meter DEBOUNCE_MS from now (a key typed since puts it off again)."""
        self._timer.start()

    def refresh(self) -> None:
        """Measures the next send now and shows it (or hides the panel without a local model)."""
        self._timer.stop()
        meter = self.meter = self._measure()
        self.bar.set_meter(meter)
        if meter is None:
            self.hide()
            return
        self.summary.setText(meter.summary())
        self.summary.setToolTip(plain_tip(meter.summary()))
        warning = meter.warning()
        self.warning.setText(warning)
        self.warning.setVisible(bool(warning))
        self.show()
