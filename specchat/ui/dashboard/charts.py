"""The dashboard's QtCharts charts: the speedup and speed of every run over time, bars per draft position or
accepted length, and the mean speedup and speed per group. Each draws in the window's palette (light or dark)."""

from __future__ import annotations

import html
from datetime import datetime
from typing import Sequence

from PySide6.QtCharts import (QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView, QDateTimeAxis, QLineSeries,
                              QScatterSeries, QValueAxis)
from PySide6.QtCore import QDateTime, QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QGraphicsSimpleTextItem, QLabel, QToolTip

from ...core.run_kind import RunKind
from ...core.vocabulary import drafter_kind
from ...storage.records import GroupStats, RunRow
from ..plain import plain_tip
from ..theme import current_theme
from .stats import (CHART_FILES, DRAFTER_COLOURS, OTHER_COLOURS, SPEED_COLOUR, SPEEDUP_COLOUR, _drafter_rank, _ms,
                    _speedup_text, _unique_labels, run_tooltip, short_label, time_axis_ticks)


def _colour(name: str) -> QColor:
    """Mid-tone colours read on white; on a dark base they are lifted so that thin lines stay visible."""
    colour = QColor(name)
    return colour.lighter(135) if current_theme().dark else colour


class ChartView(QChartView):
    """A chart with the window's palette (light or dark), fixed axes and a note shown when it has nothing to draw."""

    def __init__(self, title: str, file_name: str, parent=None):
        chart = QChart()
        chart.setTitle(title)
        chart.setMargins(QMargins(6, 4, 6, 4))
        chart.setBackgroundRoundness(6)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)  # refreshes redraw at once
        super().__init__(chart, parent)
        self.file_name = file_name
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumSize(340, 230)
        self.note = QLabel(self)
        self.note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note.setWordWrap(True)
        self.note.hide()

    def add_axis(self, axis, alignment: Qt.AlignmentFlag, title: str = ""):
        axis.setTitleText(title)
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 0.9)
        axis.setLabelsFont(font)
        axis.setTitleFont(font)
        self.chart().addAxis(axis, alignment)
        return axis

    def reset(self) -> None:
        """Remove the series and apply the current palette (it may have changed since the last refresh)."""
        chart = self.chart()
        chart.removeAllSeries()
        palette = self.palette()
        text = palette.text().color()
        chart.setBackgroundBrush(palette.base())
        chart.setBackgroundPen(QPen(palette.mid().color(), 1))
        chart.setTitleBrush(palette.text())
        title_font = QFont(self.font())
        title_font.setBold(True)
        title_font.setPointSizeF(title_font.pointSizeF() * 1.05)
        chart.setTitleFont(title_font)
        chart.legend().setLabelColor(text)
        grid = QColor(palette.mid().color())
        grid.setAlpha(110)
        for axis in chart.axes():
            axis.setLabelsColor(text)
            axis.setTitleBrush(palette.text())
            axis.setGridLineColor(grid)
            axis.setLinePenColor(palette.mid().color())
            axis.setVisible(True)
        self.note.setStyleSheet(f"color: {current_theme().muted_text.name()}")
        self.set_note("")

    def add(self, series, *axes, legend: bool = True):
        self.chart().addSeries(series)
        for axis in axes:
            series.attachAxis(axis)
        if not legend:
            for marker in self.chart().legend().markers(series):
                marker.setVisible(False)
        return series

    def set_note(self, text: str) -> None:
        """A message in the middle of an empty chart; the axes are hidden while it shows."""
        self.note.setText(text)
        self.note.setVisible(bool(text))
        for axis in self.chart().axes():
            axis.setVisible(not text)
        self._place_note()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_note()

    def _place_note(self) -> None:
        self.note.setGeometry(self.rect().adjusted(30, 40, -30, -20))


class TimelineChart(ChartView):
    """Every run's speedup (left axis, line and dots per drafter) and tokens/s (right axis, triangles) over time."""

    def __init__(self, parent=None):
        super().__init__("Speedup and speed per run over time", CHART_FILES[0], parent)
        self.x_axis = self.add_axis(QDateTimeAxis(tickCount=6), Qt.AlignmentFlag.AlignBottom)
        self.speedup_axis = self.add_axis(QValueAxis(labelFormat="%.1f", tickCount=6), Qt.AlignmentFlag.AlignLeft,
                                          "speedup ×")
        self.speed_axis = self.add_axis(QValueAxis(labelFormat="%.0f", tickCount=6), Qt.AlignmentFlag.AlignRight,
                                        "tokens / s  ▲")
        self.speedup_series: dict[str, QLineSeries] = {}
        self.speed_series: dict[str, QScatterSeries] = {}

    def show_runs(self, runs: Sequence[RunRow]) -> None:
        self.reset()
        self.speedup_series, self.speed_series = {}, {}
        if not runs:
            return
        by_drafter: dict[str, list[RunRow]] = {}
        for run in runs:
            by_drafter.setdefault(run.drafter, []).append(run)
        for drafter in sorted(by_drafter, key=_drafter_rank):
            self._add_drafter(drafter, by_drafter[drafter])
        start, end, ticks, date_format = time_axis_ticks(runs[0].created_at, runs[-1].created_at)
        self._add_reference_line(start, end)
        self._add_speed_legend()
        self.x_axis.setRange(QDateTime.fromMSecsSinceEpoch(int(_ms(start))),
                             QDateTime.fromMSecsSinceEpoch(int(_ms(end))))
        self.x_axis.setTickCount(ticks)
        self.x_axis.setFormat(date_format)
        self._set_value_ranges(runs)
        if not any(r.speedup is not None for r in runs):
            self.chart().setTitle("Speed per run over time (no run has a speedup measurement)")
        else:
            self.chart().setTitle("Speedup and speed per run over time")

    def _add_drafter(self, drafter: str, runs: list[RunRow]) -> None:
        colour = _colour(DRAFTER_COLOURS.get(RunKind.parse(drafter).colour_key) or OTHER_COLOURS[0])
        measured = [r for r in runs if r.speedup is not None]
        line = QLineSeries(name=drafter_kind(drafter).chart_label)
        line.setPen(QPen(colour, 2))
        dots = QScatterSeries(markerSize=7.0, color=colour, borderColor=self.palette().base().color())
        for run in measured:
            line.append(_ms(run.created_at), run.speedup)
            dots.append(_ms(run.created_at), run.speedup)
        self.add(line, self.x_axis, self.speedup_axis)
        self.add(dots, self.x_axis, self.speedup_axis, legend=False)
        dots.hovered.connect(lambda point, state, rows=measured: self._tip(point, state, rows))
        light = QColor(colour)
        light.setAlpha(150)
        speed = QScatterSeries(name=f"{drafter_kind(drafter).chart_label} tokens/s", markerSize=8.0, color=light,
                               borderColor=light)
        speed.setMarkerShape(QScatterSeries.MarkerShape.MarkerShapeTriangle)
        for run in runs:
            speed.append(_ms(run.created_at), run.tokens_per_s)
        self.add(speed, self.x_axis, self.speed_axis, legend=False)
        speed.hovered.connect(lambda point, state, rows=runs: self._tip(point, state, rows))
        self.speedup_series[drafter] = line
        self.speed_series[drafter] = speed

    def _add_reference_line(self, start: datetime, end: datetime) -> None:
        """1× = as fast as plain decoding: above the line the drafter paid off."""
        line = QLineSeries(name="1× = plain")
        line.setPen(QPen(current_theme().muted_text, 1, Qt.PenStyle.DashLine))
        line.append(_ms(start), 1.0)
        line.append(_ms(end), 1.0)
        self.add(line, self.x_axis, self.speedup_axis, legend=False)

    def _add_speed_legend(self) -> None:
        """One legend entry explains the triangles of every drafter (tokens/s on the right axis)."""
        key = QScatterSeries(name="tokens/s (right axis)", markerSize=8.0, color=current_theme().muted_text,
                             borderColor=current_theme().muted_text)
        key.setMarkerShape(QScatterSeries.MarkerShape.MarkerShapeTriangle)
        self.add(key, self.x_axis, self.speed_axis)

    def _set_value_ranges(self, runs: Sequence[RunRow]) -> None:
        speedups = [r.speedup for r in runs if r.speedup is not None] or [1.0]
        low, high = min(min(speedups), 1.0), max(max(speedups), 1.0)
        margin = max((high - low) * 0.12, 0.1)
        self.speedup_axis.setRange(max(0.0, low - margin), high + margin)
        self.speedup_axis.applyNiceNumbers()
        self.speed_axis.setRange(0.0, max(max(r.tokens_per_s for r in runs), 1.0) * 1.1)
        self.speed_axis.applyNiceNumbers()

    def _tip(self, point: QPointF, state: bool, runs: Sequence[RunRow]) -> None:
        if not state or not runs:
            QToolTip.hideText()
            return
        run = min(runs, key=lambda r: abs(_ms(r.created_at) - point.x()))
        QToolTip.showText(self.cursor().pos(), plain_tip(run_tooltip(run)), self)


class GroupBarsChart(ChartView):
    """Bars per draft position (or accepted length), one bar set per group."""

    def __init__(self, title: str, file_name: str, x_title: str, y_title: str, percent: bool, parent=None):
        super().__init__(title, file_name, parent)
        self.percent = percent
        self.x_axis = self.add_axis(QBarCategoryAxis(), Qt.AlignmentFlag.AlignBottom, x_title)
        self.y_axis = self.add_axis(QValueAxis(labelFormat="%.0f%%" if percent else "%.1f", tickCount=6),
                                    Qt.AlignmentFlag.AlignLeft, y_title)
        self.bar_series: QBarSeries | None = None

    def show_bars(self, categories: list[str], bars: list[tuple[str, str, list[float]]], top: float,
                  empty_note: str, ticks: int = 6) -> None:
        """`bars`: (label, colour, one value per category) per bar set; the y axis runs from 0 to `top`."""
        self.reset()
        self.bar_series = None
        self.x_axis.clear()
        if not bars or not categories:
            self.set_note(empty_note)
            return
        series = QBarSeries()
        for label, colour, values in bars:
            bar_set = QBarSet(_markup_free(label))
            bar_set.append([float(v) for v in values])
            bar_set.setColor(_colour(colour))
            bar_set.setBorderColor(_colour(colour))
            series.append(bar_set)
        series.hovered.connect(lambda state, index, bar_set: self._tip(state, index, bar_set, categories))
        self.x_axis.append([_markup_free(c) for c in categories])
        self.add(series, self.x_axis, self.y_axis)
        self.y_axis.setRange(0.0, top)
        self.y_axis.setTickCount(ticks)
        self.bar_series = series

    def bar_values(self) -> dict[str, list[float]]:
        """Each bar set's values by its label: what the chart draws."""
        if self.bar_series is None:
            return {}
        return {html.unescape(s.label()): [s.at(i) for i in range(s.count())] for s in self.bar_series.barSets()}

    def _tip(self, state: bool, index: int, bar_set: QBarSet, categories: list[str]) -> None:
        if not state:
            QToolTip.hideText()
            return
        value = bar_set.at(index)
        shown = f"{value:.1f}%" if self.percent else f"{value:.3f}"
        QToolTip.showText(self.cursor().pos(), plain_tip(
            f"{html.unescape(bar_set.label())}\n{self.x_axis.titleText()} {categories[index]}: {shown}"), self)


class GroupsChart(ChartView):
    """Mean speedup per group (bars, left axis) and tokens/s (line, right axis)."""

    def __init__(self, parent=None):
        super().__init__("Mean speedup and speed per group", CHART_FILES[3], parent)
        self.x_axis = self.add_axis(QBarCategoryAxis(), Qt.AlignmentFlag.AlignBottom)
        self.speedup_axis = self.add_axis(QValueAxis(labelFormat="%.1f", tickCount=6), Qt.AlignmentFlag.AlignLeft,
                                          "speedup ×")
        self.speed_axis = self.add_axis(QValueAxis(labelFormat="%.0f", tickCount=6), Qt.AlignmentFlag.AlignRight,
                                        "tokens / s")
        self.speedup_set: QBarSet | None = None
        self.speed_line: QLineSeries | None = None
        self.value_labels: list[tuple[QGraphicsSimpleTextItem, int]] = []  # (label, bar index)
        self.chart().plotAreaChanged.connect(self._place_value_labels)

    def show_groups(self, groups: Sequence[GroupStats], labels: dict[str, str]) -> None:
        self.reset()
        self._remove_value_labels()
        self.speedup_set, self.speed_line = None, None
        self.x_axis.clear()
        if not groups:
            self.set_note("No groups for this grouping in the selected runs")
            return
        speedups = [g.aggregate.mean_speedup for g in groups]
        bar_set = QBarSet("mean speedup")
        bar_set.append([s if s is not None else 0.0 for s in speedups])
        bar_set.setColor(_colour(SPEEDUP_COLOUR))
        bar_set.setBorderColor(_colour(SPEEDUP_COLOUR))
        bars = QBarSeries()
        bars.append(bar_set)
        bars.hovered.connect(lambda state, index, _: self._tip(state, index, groups))
        names = _unique_labels([short_label(labels[g.key], 22) for g in groups])
        self.x_axis.append([_markup_free(name) for name in names])
        self.add(bars, self.x_axis, self.speedup_axis)
        speed = QLineSeries(name="tokens / s")
        speed.setPen(QPen(_colour(SPEED_COLOUR), 2))
        speed.setPointsVisible(True)
        speed.setMarkerSize(7.0)
        for index, group in enumerate(groups):
            speed.append(float(index), group.aggregate.tokens_per_s)
        self.add(speed, self.x_axis, self.speed_axis)
        measured = [s for s in speedups if s is not None]
        self.speedup_axis.setRange(0.0, max([1.0, *measured]) * 1.15)
        self.speedup_axis.applyNiceNumbers()
        self.speed_axis.setRange(0.0, max([1.0, *(g.aggregate.tokens_per_s for g in groups)]) * 1.15)
        self.speed_axis.applyNiceNumbers()
        # Qt cuts long category names short ("Rust borrow ch…"; the tooltips and the table have them whole);
        # slanting only helps when there are many narrow categories, and it costs height.
        self.x_axis.setLabelsAngle(-25 if len(names) > 5 else 0)
        self.speedup_set, self.speed_line = bar_set, speed
        self._add_value_labels(speedups)

    def _add_value_labels(self, speedups: list[float | None]) -> None:
        """"1.20×" at the foot of each bar. Drawn here rather than by the series: its labels format numbers with
        %g ("1.2×" beside "1.33×"), and at the top of a bar they would collide with the tokens/s line."""
        font = QFont(self.font())
        font.setBold(True)
        for index, speedup in enumerate(speedups):
            if speedup is None:
                continue
            label = QGraphicsSimpleTextItem(_speedup_text(speedup), self.chart())
            label.setFont(font)
            label.setZValue(10)
            self.value_labels.append((label, index))
        self._place_value_labels()

    def _place_value_labels(self) -> None:
        if self.speedup_set is None:
            return
        series = self.chart().series()[0]
        for label, index in self.value_labels:
            base = self.chart().mapToPosition(QPointF(index, 0.0), series)
            top = self.chart().mapToPosition(QPointF(index, self.speedup_set.at(index)), series)
            box = label.boundingRect()
            fits = base.y() - top.y() > box.height() + 6
            label.setBrush(QColor("white") if fits else self.palette().text())
            y = base.y() - box.height() - 3 if fits else top.y() - box.height() - 2  # too short: above the bar
            label.setPos(base.x() - box.width() / 2, y)

    def _remove_value_labels(self) -> None:
        for label, _ in self.value_labels:
            self.scene().removeItem(label)
        self.value_labels = []

    def _tip(self, state: bool, index: int, groups: Sequence[GroupStats]) -> None:
        if not state:
            QToolTip.hideText()
            return
        group = groups[index]
        speedup = group.aggregate.mean_speedup
        QToolTip.showText(self.cursor().pos(), plain_tip(f"{group.label}\n{group.aggregate.runs} runs · "
                          f"{_speedup_text(speedup)} · {group.aggregate.tokens_per_s:.1f} tok/s"), self)


def _markup_free(text: str) -> str:
    """Qt Charts draws legend and axis labels as HTML: a model's name (a remote server's id, say) is escaped so
    that it shows as written."""
    return html.escape(text, quote=False)
