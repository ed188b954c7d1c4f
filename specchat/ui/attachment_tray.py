"""The widgets above the composer for attaching documents: the paperclip button, the row that says which file is
being read (with Cancel), the red line that says why a file was not attached, and the pending chips, one per
document read and waiting to be sent, each with a × to remove it. What they do is ui/attachments.py's.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QScrollArea, QSizePolicy,
                               QToolButton, QWidget)

from .banner import ErrorBanner
from .layouts import stacked
from .plain import plain_label, plain_tip

CHIP_TEXT_WIDTH = 320  # pixels of a chip's text; a longer name is cut with "…" (the tooltip has all of it)


def paperclip_icon(colour: QColor, size: int = 20) -> QIcon:
    """A paperclip drawn in `colour` (no icon font or emoji is needed, so it shows on every system)."""
    pixmap = QPixmap(size * 2, size * 2)  # drawn at twice the size: sharp on a high-density screen too
    pixmap.setDevicePixelRatio(2.0)
    pixmap.fill(Qt.GlobalColor.transparent)
    path = QPainterPath(QPointF(15.5, 8))
    path.lineTo(15.5, 17)
    path.arcTo(QRectF(8.5, 13.5, 7, 7), 0, -180)  # the outer loop's bottom
    path.lineTo(8.5, 6)
    path.arcTo(QRectF(8.5, 3.5, 5, 5), 180, -180)  # the top
    path.lineTo(13.5, 16)
    path.arcTo(QRectF(10.5, 14.5, 3, 3), 0, -180)  # the inner loop's bottom
    path.lineTo(10.5, 8)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.scale(size / 24, size / 24)
    painter.translate(12, 12)
    painter.rotate(40)
    painter.translate(-12, -12)
    painter.setPen(QPen(colour, 1.7, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap, Qt.PenJoinStyle.RoundJoin))
    painter.drawPath(path)
    painter.end()
    return QIcon(pixmap)


class Chip(QFrame):
    """A pending document: its text ("report.pdf · 12 pages · 3,400 tokens") and a × that asks to remove it."""

    remove_requested = Signal(object)  # this chip

    def __init__(self, text: str, key: object, parent=None):
        super().__init__(parent)
        self.key = key  # what the chip stands for (the pending document)
        self.setObjectName("chip")
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setStyleSheet("#chip { border: 1px solid palette(mid); border-radius: 10px; background: palette(base); }")
        self.label = plain_label(QLabel())
        self.remove = QToolButton(text="×", autoRaise=True)
        self.remove.clicked.connect(lambda: self.remove_requested.emit(self))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(9, 1, 2, 1)
        layout.setSpacing(2)
        layout.addWidget(self.label)
        layout.addWidget(self.remove)
        self.set_text(text)

    def set_text(self, text: str) -> None:
        """Shows `text`, cut to CHIP_TEXT_WIDTH with "…" (all of it in the tooltip)."""
        self.text = text
        shown = self.label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, CHIP_TEXT_WIDTH)
        self.label.setText(shown)
        self.setToolTip(plain_tip(text))
        self.remove.setToolTip(plain_tip(f"Remove {text.split(' · ')[0]}"))


class AttachmentTray(QWidget):
    """Above the composer: the reading row (hidden while nothing is read), the problem line (an ErrorBanner:
    red, dismissable) and the row of chips (hidden while there are none), which scrolls sideways when it is
    longer than the window is wide."""

    cancel_requested = Signal()
    remove_requested = Signal(object)  # the key of the chip whose × was clicked

    def __init__(self, parent=None):
        super().__init__(parent)
        self.reading = plain_label(QLabel())
        self.progress = QProgressBar(maximumWidth=180, maximumHeight=10, textVisible=False, maximum=100)
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("Stop reading this file")
        self.cancel.clicked.connect(self.cancel_requested)
        reading_row = QHBoxLayout()
        reading_row.setContentsMargins(0, 0, 0, 0)
        reading_row.addWidget(self.reading)
        reading_row.addWidget(self.progress)
        reading_row.addWidget(self.cancel)
        reading_row.addStretch(1)
        self.reading_box = QWidget()
        self.reading_box.setLayout(reading_row)
        self.problem = ErrorBanner()
        self.chips: list[Chip] = []
        self._chip_row = QHBoxLayout()
        self._chip_row.setContentsMargins(0, 1, 0, 0)
        self._chip_row.addStretch(1)
        inner = QWidget()
        inner.setLayout(self._chip_row)
        self.chip_area = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.chip_area.setWidget(inner)
        self.chip_area.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chip_area.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        stacked(self, self.reading_box, self.problem, self.chip_area, spacing=4)
        self.reading_box.hide()
        self.chip_area.hide()

    def show_reading(self, text: str, percent: int) -> None:
        """The reading row says `text` ("Reading report.pdf… 40%") over a bar at `percent`."""
        self.reading.setText(text)
        self.progress.setValue(percent)
        self.reading_box.show()

    def hide_reading(self) -> None:
        self.reading_box.hide()

    def add_chip(self, text: str, key: object) -> Chip:
        chip = Chip(text, key)
        chip.remove_requested.connect(lambda shown: self.remove_requested.emit(shown.key))
        self._chip_row.insertWidget(len(self.chips), chip, 0, Qt.AlignmentFlag.AlignTop)
        self.chips.append(chip)
        self._fit_chip_area()
        return chip

    def remove_chip(self, key: object) -> None:
        for chip in [c for c in self.chips if c.key is key]:
            self.chips.remove(chip)
            chip.deleteLater()
        self._fit_chip_area()

    def clear_chips(self) -> None:
        for chip in self.chips:
            chip.deleteLater()
        self.chips = []
        self._fit_chip_area()

    def _fit_chip_area(self) -> None:
        """Shows the chips' row, as high as a chip and a scroll bar, when it has chips."""
        if self.chips:
            chip_height = max(chip.sizeHint().height() for chip in self.chips)
            bar = self.chip_area.horizontalScrollBar().sizeHint().height()
            self.chip_area.setFixedHeight(chip_height + bar + 4)
        self.chip_area.setVisible(bool(self.chips))

    def sizeHint(self) -> QSize:
        return QSize(200, super().sizeHint().height())
