"""The race's live views of its tracks: one Lane per decoding (its name, figures and text) and the tokens-over-time
chart. Both show a prefix of each Track, so the same widgets serve the live race and the replay."""

from __future__ import annotations

import html

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QLabel, QTextBrowser, QVBoxLayout

from ...core.run_kind import RunKind
from ...core.vocabulary import DRAFT_ORIGIN, TARGET_ORIGIN, Origin, drafter_kind
from ...engine.race import Track
from ..plain import plain_label
from ..theme import current_theme
from ..transcript import DRAFT_TIP, ORIGIN_PROPERTY, TARGET_TIP, draft_positions

# By lane position, not by drafter: the first lane is always plain decoding.
LANE_COLOURS = ("#6b7280", "#2e8b57", "#3b6ea8", "#c2185b", "#e69500")


def lane_label(drafter: str) -> str:
    """A lane's name in full (its tooltip, the diff dialog's title), from its run name `drafter`."""
    kind = RunKind.parse(drafter)
    if kind.is_remote:
        return "Remote engine (another machine)"
    return "Plain decoding (target alone)" if kind.is_plain else drafter_kind(drafter).label


def short_label(drafter: str) -> str:
    """For the chart's legend and the table, where space is short."""
    return drafter_kind(drafter).short_label


class LaneView(QTextBrowser):
    """A lane's reply as plain text, accepted draft tokens highlighted; shows a prefix of a Track (live or replay)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.document().setDocumentMargin(10)
        self._track: Track | None = None
        self._shown = 0  # tokens on screen

    def show_tokens(self, track: Track, count: int) -> None:
        """Show the first `count` tokens of `track` (appending when it only grew, redrawing when it shrank)."""
        if track is not self._track or count < self._shown:
            self.clear()
            self._track, self._shown = track, 0
        if count == self._shown:
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        theme = current_theme()
        for piece, origin in track.runs(self._shown, count):
            cursor.insertText(piece, _origin_format(origin == Origin.DRAFT, theme))
        self._shown = count
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def draft_positions(self) -> list[int]:
        return draft_positions(self.document())


def seconds_format(span: float, ticks: int) -> str:
    """The seconds axis's label format: as many decimals as its tick step needs, at most three, so that every tick
    reads as its value (0.05 s apart: "%.2f"; 0.25 s: "%.2f"; 0.5 s: "%.1f"; whole seconds: "%.0f")."""
    step = span / max(ticks - 1, 1)
    decimals = 0
    while decimals < 3 and not _whole(step * 10 ** decimals):
        decimals += 1
    return f"%.{decimals}f"


def _whole(value: float) -> bool:
    return abs(value - round(value)) <= 1e-6 * max(abs(value), 1.0)


def _origin_format(drafted: bool, theme) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setProperty(ORIGIN_PROPERTY, DRAFT_ORIGIN if drafted else TARGET_ORIGIN)
    if drafted:
        fmt.setBackground(theme.draft_background)
    fmt.setToolTip(DRAFT_TIP if drafted else TARGET_TIP)
    return fmt


class Lane(QFrame):
    """One pane: the lane's name, its live figures and its text."""

    def __init__(self, drafter: str, colour: str, parent=None):
        super().__init__(parent)
        self.drafter = drafter
        self.setFrameShape(QFrame.Shape.StyledPanel)
        # Up to six lanes share the window's width: the title is the check box's short name (the full one in its
        # tooltip), and the figures wrap rather than widen the window or get cut.
        name = drafter_kind(drafter).box_label
        title = QLabel(f"<span style='color:{colour}'>■</span>&nbsp;<b>{html.escape(name)}</b>",
                       toolTip=lane_label(drafter))
        title.setMinimumWidth(40)
        self.status = plain_label(QLabel("waiting", wordWrap=True))  # may carry a remote server's figures
        self.status.setMinimumWidth(40)
        self.status.setStyleSheet(f"color: {current_theme().muted_text.name()}")
        self.view = LaneView()
        self.view.setMinimumWidth(120)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(3)
        layout.addWidget(title)
        layout.addWidget(self.status)
        layout.addWidget(self.view, 1)


class TokensChart(QChartView):
    """Tokens over time, one line per lane, with a vertical cursor at the replay's clock."""

    def __init__(self, parent=None):
        chart = QChart()
        chart.setMargins(QMargins(4, 4, 4, 4))
        chart.legend().setVisible(False)  # the lanes' headers carry the colour key; a legend here would be cut
        chart.setTitle("Tokens over time (lane colours)")
        super().__init__(chart, parent)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.x_axis = QValueAxis(titleText="seconds", labelFormat="%.1f")
        self.y_axis = QValueAxis(titleText="tokens", labelFormat="%d")
        chart.addAxis(self.x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(self.y_axis, Qt.AlignmentFlag.AlignLeft)
        self.cursor = QLineSeries(name="replay")
        self.series: list[QLineSeries] = []
        self._top = 1
        self.expected_tokens = 0  # the y axis covers the token limit while a race runs

    def set_tracks(self, tracks: list[Track]) -> None:
        chart = self.chart()
        chart.removeAllSeries()
        self.series = []
        theme = current_theme()
        chart.setBackgroundBrush(self.palette().base())
        chart.setTitleBrush(self.palette().text())
        chart.legend().setLabelColor(self.palette().text().color())
        for axis in (self.x_axis, self.y_axis):
            axis.setLabelsColor(self.palette().text().color())
            axis.setTitleBrush(self.palette().text())
        for i, track in enumerate(tracks):
            series = QLineSeries(name=short_label(track.drafter))
            previous = 0
            for t, n in track.curve():  # a step line: tokens appear at once when a step ends
                series.append(QPointF(t, previous))
                series.append(QPointF(t, n))
                previous = n
            series.setPen(QPen(QColor(LANE_COLOURS[i % len(LANE_COLOURS)]), 2))
            chart.addSeries(series)
            series.attachAxis(self.x_axis)
            series.attachAxis(self.y_axis)
            self.series.append(series)
        duration = max((t.wall_s for t in tracks), default=0.0) or 1.0
        self._top = max(max((len(t.token_ids) for t in tracks), default=0), self.expected_tokens, 1)
        self.x_axis.setRange(0, duration)
        self.y_axis.setRange(0, self._top)
        self.x_axis.applyNiceNumbers()
        self.y_axis.applyNiceNumbers()
        self.x_axis.setLabelFormat(seconds_format(self.x_axis.max() - self.x_axis.min(), self.x_axis.tickCount()))
        self._top = self.y_axis.max()
        self.cursor = QLineSeries(name="replay")
        self.cursor.setPen(QPen(theme.muted_text, 1, Qt.PenStyle.DashLine))
        chart.addSeries(self.cursor)
        self.cursor.attachAxis(self.x_axis)
        self.cursor.attachAxis(self.y_axis)
        self.set_cursor(0.0)

    def set_cursor(self, t: float) -> None:
        self.cursor.replace([QPointF(t, 0), QPointF(t, self._top)])
