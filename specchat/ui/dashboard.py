"""The statistics dashboard: every stored generation run (chat replies, race lanes, benchmark prompts), filtered,
summed, charted and exported, and a benchmark that adds measured runs to it.

The figures come from the Store (RunRow, GroupStats); what is computed here without Qt (the accepted-length
distribution, the summary of the filtered runs, the CSV and JSON rows) is kept in module-level functions so it can be
tested without a window.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import json
import math
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Iterable, Sequence

from PySide6.QtCharts import (QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView, QDateTimeAxis, QLineSeries,
                              QScatterSeries, QValueAxis)
from PySide6.QtCore import QDate, QDateTime, QMargins, QObject, QPointF, Qt, Signal, Slot
from PySide6.QtGui import QAction, QColor, QFont, QKeySequence, QPainter, QPen
from PySide6.QtWidgets import (QAbstractItemView, QButtonGroup, QComboBox, QDateEdit, QDialog, QDialogButtonBox,
                               QFileDialog, QFormLayout, QFrame, QGraphicsSimpleTextItem, QGridLayout, QHBoxLayout,
                               QHeaderView, QLabel, QLineEdit, QProgressBar, QPushButton, QRadioButton, QSizePolicy,
                               QSpinBox, QSplitter, QStackedWidget, QTableWidget, QTableWidgetItem, QToolTip,
                               QVBoxLayout, QWidget)

from .. import __version__
from ..bench import BenchRunner, BenchSettings, bench_run_values, load_prompts
from ..engine import PromptError, SpecchatError
from ..engine.drafters import HEAD_DRAFTERS, MODEL_DRAFTERS
from ..engine.pair import ModelPair
from ..resources import default_prompt_suite
from ..storage import StorageError
from ..storage.records import GroupStats, RunAggregate, RunFilter, RunRow
from .theme import current_theme
from .workers import CallWorker

# --- what the filters offer ---------------------------------------------------------------------------------------

ALL_TIME, CUSTOM_DATES = "all", "custom"
RANGES = (("All time", ALL_TIME), ("Last 7 days", 7), ("Last 30 days", 30), ("Custom dates", CUSTOM_DATES))
SOURCES = (("All sources", None), ("Chat replies", "chat"), ("Races", "race"), ("Benchmarks", "bench"))
GROUPINGS = (("Model pair & drafter", "pair"), ("App session", "app_session"), ("Conversation", "conversation"),
             ("Benchmark category", "category"))

DRAFTER_ORDER = ("none", "pld", "history", "model", "hybrid", "eagle", "eagle-hybrid")
DRAFTER_NAMES = {"none": "plain", "pld": "prompt lookup", "history": "lookup + past replies", "model": "draft model",
                 "hybrid": "hybrid", "eagle": "draft head", "eagle-hybrid": "head hybrid"}
# The race window's lane colours, so that a drafter looks the same in both windows.
DRAFTER_COLOURS = {"none": "#6b7280", "pld": "#2e8b57", "model": "#3b6ea8", "hybrid": "#c2185b",
                   "eagle": "#7b52ab", "eagle-hybrid": "#d84315"}
OTHER_COLOURS = ("#00897b", "#5d8aa8", "#8d6e63", "#9e9d24", "#ad1457", "#e69500")
SPEEDUP_COLOUR = "#3b6ea8"
SPEED_COLOUR = "#e69500"

MAX_CHART_GROUPS = 8  # more bar sets than this are unreadable; the table lists every group
MAX_POSITIONS = 10
LABEL_CHARS = 28

BENCH_DEVICE_USER = "bench"
DEFAULT_BENCH_PROMPTS = 8  # a quick run; 0 = the whole file
DEFAULT_BENCH_TOKENS = 128

CHART_FILES = ("speedup-over-time.png", "acceptance-by-position.png", "accepted-lengths.png", "groups.png")
GROUP_COLUMNS = ("Group", "Runs", "Tokens", "Tok/s", "Mean speedup", "α", "τ", "First run", "Last run")


# --- computations without Qt --------------------------------------------------------------------------------------

def accepted_length_distribution(proposed_by_position: Sequence[int],
                                 accepted_by_position: Sequence[int]) -> list[float]:
    """P(a draft step accepted exactly j draft tokens) for j = 0..K; [] when there was no draft step.

    Every draft step proposes at position 1, so proposed[0] counts the steps, and accepted[i-1] counts the steps
    that accepted at least i tokens (acceptance stops at the first rejection). Exactly j = at least j - at least j+1.
    """
    steps = proposed_by_position[0] if proposed_by_position else 0
    if not steps:
        return []
    at_least = [steps, *accepted_by_position, 0]
    return [(at_least[j] - at_least[j + 1]) / steps for j in range(len(accepted_by_position) + 1)]


CSV_COLUMNS = tuple(f.name for f in dataclasses.fields(RunRow)) + ("alpha", "tau")


def csv_row(run: RunRow) -> list[str]:
    """One run as CSV cells, in CSV_COLUMNS order: lists ";"-joined, None empty, datetimes ISO 8601 (UTC)."""
    values = {**dataclasses.asdict(run), "alpha": run.alpha, "tau": run.tau}
    return [_csv_cell(values[column]) for column in CSV_COLUMNS]


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ";".join(str(item) for item in value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def run_to_json(run: RunRow) -> dict:
    values = {**dataclasses.asdict(run), "pair": run.pair, "alpha": run.alpha, "tau": run.tau}
    values["created_at"] = run.created_at.isoformat()
    for key in ("proposed_by_position", "accepted_by_position"):
        values[key] = list(values[key])
    return values


def group_to_json(group: GroupStats) -> dict:
    return {"key": group.key, "label": group.label, **dataclasses.asdict(group.aggregate),
            "first_at": group.first_at.isoformat() if group.first_at else None,
            "last_at": group.last_at.isoformat() if group.last_at else None,
            "proposed_by_position": list(group.proposed_by_position),
            "accepted_by_position": list(group.accepted_by_position),
            "acceptance_by_position": list(group.acceptance_by_position),
            "accepted_length_distribution": accepted_length_distribution(group.proposed_by_position,
                                                                         group.accepted_by_position)}


def drafter_of_group(key: str) -> str | None:
    """The drafter in a "pair:…|drafter" or "category:…|drafter" group key (run_groups' format), else None."""
    kind, _, rest = key.partition(":")
    return rest.rpartition("|")[2] if kind in ("pair", "category") and "|" in rest else None


def group_colours(groups: Sequence[GroupStats]) -> dict[str, str]:
    """A colour per group: a drafter's own colour for the first group of that drafter, so the charts agree with
    the timeline's colours; the other colours for the rest."""
    colours: dict[str, str] = {}
    spare = [*OTHER_COLOURS, *DRAFTER_COLOURS.values()]
    used: set[str] = set()
    for group in groups:
        colour = DRAFTER_COLOURS.get(drafter_of_group(group.key) or "")
        if colour is None or colour in used:
            colour = next((c for c in spare if c not in used), spare[len(colours) % len(spare)])
        colours[group.key] = colour
        used.add(colour)
    return colours


def reading_order(groups: Iterable[GroupStats], by: str) -> list[GroupStats]:
    """A stable order for legends and the table: by name and then drafter (plain first) for pairs and categories,
    by time for sessions and conversations."""
    if by in ("pair", "category"):
        return sorted(groups, key=lambda g: (g.label.rpartition(" · ")[0].casefold(),
                                             _drafter_rank(drafter_of_group(g.key) or "")))
    return sorted(groups, key=lambda g: g.first_at or datetime.min.replace(tzinfo=timezone.utc))


def chart_groups(groups: Sequence[GroupStats], by: str) -> list[GroupStats]:
    """The groups the charts show: the MAX_CHART_GROUPS with the most runs, in reading order."""
    return reading_order(sorted(groups, key=lambda g: g.aggregate.runs, reverse=True)[:MAX_CHART_GROUPS], by)


def chart_labels(groups: Sequence[GroupStats], by: str) -> dict[str, str]:
    """Names for legends and axes that say what tells the groups apart. With one target model (the usual case) a
    pair group is named by its drafter alone, and by its draft model too when there are several; drafters are
    named as in the timeline's legend. The table keeps the full names."""
    labels = {g.key: g.label for g in groups}
    if by == "category":
        for group in groups:
            drafter = drafter_of_group(group.key) or ""
            labels[group.key] = f"{group.label.rpartition(' · ')[0]} · {DRAFTER_NAMES.get(drafter, drafter)}"
        return labels
    if by != "pair":
        return labels
    parsed = {g.key: g.key.removeprefix("pair:").rpartition("|") for g in groups}
    pairs = {pair for pair, _, _ in parsed.values()}
    if len({pair.partition(" + ")[0] for pair in pairs}) != 1:
        return labels
    several_drafts = len({pair for pair in pairs if " + " in pair}) > 1
    for key, (pair, _, drafter) in parsed.items():
        name = DRAFTER_NAMES.get(drafter, drafter)
        draft = pair.partition(" + ")[2]
        labels[key] = f"{name} · {draft}" if several_drafts and draft else name
    return labels


def time_axis_ticks(first: datetime, last: datetime) -> tuple[datetime, datetime, int, str]:
    """The timeline's x range with ticks on whole local days (whole hours when every run is from one day), so
    that no two tick labels read the same: (start, end, tick count, Qt date format)."""
    first, last = first.astimezone(), last.astimezone()
    if last - first < timedelta(hours=2):  # a fresh database: ticks every few minutes, not one point per hour
        span = max(1, math.ceil((last - first).total_seconds() / 60) + 1)
        step = next(m for m in (1, 2, 5, 10, 15, 20, 30) if span / m <= 6)
        start = first.replace(minute=first.minute - first.minute % step, second=0, microsecond=0)
        count = max(1, math.ceil((last - start).total_seconds() / 60 / step))
        if start + timedelta(minutes=step * count) < last:
            count += 1
        return start, start + timedelta(minutes=step * count), count + 1, "HH:mm"
    if first.date() == last.date():
        start = first.replace(minute=0, second=0, microsecond=0)
        hours = max(1, math.ceil((last - start).total_seconds() / 3600))
        step = math.ceil(hours / 6)
        count = math.ceil(hours / step)
        return start, start + timedelta(hours=step * count), count + 1, "HH:mm"
    days = (last.date() - first.date()).days + 1
    step = math.ceil(days / 7)
    count = math.ceil(days / step)
    return (local_day_start(first.date()), local_day_start(first.date() + timedelta(days=step * count)),
            count + 1, "d MMM")


def short_label(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def local_day_start(day: date) -> datetime:
    """Local midnight of `day`, timezone-aware: the dashboard's dates are the user's calendar days."""
    return datetime.combine(day, time()).astimezone()


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _local(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%d %b %Y %H:%M") if moment is not None else "–"


def _ms(moment: datetime) -> float:
    return moment.timestamp() * 1000.0


def _drafter_rank(drafter: str) -> int:
    return DRAFTER_ORDER.index(drafter) if drafter in DRAFTER_ORDER else len(DRAFTER_ORDER)


# --- charts -------------------------------------------------------------------------------------------------------

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
        colour = _colour(DRAFTER_COLOURS.get(drafter, OTHER_COLOURS[0]))
        measured = [r for r in runs if r.speedup is not None]
        line = QLineSeries(name=DRAFTER_NAMES.get(drafter, drafter))
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
        speed = QScatterSeries(name=f"{DRAFTER_NAMES.get(drafter, drafter)} tokens/s", markerSize=8.0, color=light,
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
        QToolTip.showText(self.cursor().pos(), run_tooltip(run), self)


def run_tooltip(run: RunRow) -> str:
    where = {"chat": f"chat “{run.conversation_title}”" if run.conversation_title else "chat reply",
             "race": "race lane", "bench": f"benchmark ({run.category})" if run.category else "benchmark"}
    parts = [f"{run.new_tokens} tokens", f"{run.tokens_per_s:.1f} tok/s"]
    if run.speedup is not None:
        parts.insert(0, f"{run.speedup:.2f}× ({run.speedup_basis or 'speedup'})")
    if run.alpha is not None:
        parts.append(f"α {run.alpha:.2f}")
    if run.tau is not None:
        parts.append(f"τ {run.tau:.2f}")
    return (f"{_local(run.created_at)} · {DRAFTER_NAMES.get(run.drafter, run.drafter)} · "
            f"{where.get(run.source, run.source)}\n{run.pair}\n" + " · ".join(parts))


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
            bar_set = QBarSet(label)
            bar_set.append([float(v) for v in values])
            bar_set.setColor(_colour(colour))
            bar_set.setBorderColor(_colour(colour))
            series.append(bar_set)
        series.hovered.connect(lambda state, index, bar_set: self._tip(state, index, bar_set, categories))
        self.x_axis.append(categories)
        self.add(series, self.x_axis, self.y_axis)
        self.y_axis.setRange(0.0, top)
        self.y_axis.setTickCount(ticks)
        self.bar_series = series

    def bar_values(self) -> dict[str, list[float]]:
        """Each bar set's values by its label: what the chart draws."""
        if self.bar_series is None:
            return {}
        return {s.label(): [s.at(i) for i in range(s.count())] for s in self.bar_series.barSets()}

    def _tip(self, state: bool, index: int, bar_set: QBarSet, categories: list[str]) -> None:
        if not state:
            QToolTip.hideText()
            return
        value = bar_set.at(index)
        shown = f"{value:.1f}%" if self.percent else f"{value:.3f}"
        QToolTip.showText(self.cursor().pos(),
                          f"{bar_set.label()}\n{self.x_axis.titleText()} {categories[index]}: {shown}", self)


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
        self.x_axis.append(names)
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
        QToolTip.showText(self.cursor().pos(), f"{group.label}\n{group.aggregate.runs} runs · "
                          f"{_speedup_text(speedup)} · {group.aggregate.tokens_per_s:.1f} tok/s", self)


def _speedup_text(speedup: float | None) -> str:
    return f"{speedup:.2f}×" if speedup is not None else "–"


def _unique_labels(labels: list[str]) -> list[str]:
    """A bar category axis merges equal categories; two groups whose shortened labels clash get a number."""
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return unique


# --- summary cards and the groups table ---------------------------------------------------------------------------

class SummaryCard(QFrame):
    """One headline figure: a caption, the value, and a line saying what it is."""

    def __init__(self, caption: str, tooltip: str, parent=None):
        super().__init__(parent)
        self.setObjectName("card")
        self.setToolTip(tooltip)
        self.caption = QLabel(caption)
        self.value = QLabel("–")
        self.detail = QLabel("")
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.9)
        font.setBold(True)
        self.value.setFont(font)
        small = QFont(self.font())
        small.setPointSizeF(small.pointSizeF() * 0.85)
        self.caption.setFont(small)
        self.detail.setFont(small)
        muted = current_theme().muted_text.name()
        self.caption.setStyleSheet(f"color: {muted}")
        self.detail.setStyleSheet(f"color: {muted}")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(1)
        layout.addWidget(self.caption)
        layout.addWidget(self.value)
        layout.addWidget(self.detail)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_value(self, value: str, detail: str = "") -> None:
        self.value.setText(value)
        self.detail.setText(detail)


class SortItem(QTableWidgetItem):
    """A cell that sorts by the number (or date) behind its text: 1,234 after 999, "–" first."""

    def __init__(self, text: str, key):
        super().__init__(text)
        self.key = key

    def __lt__(self, other) -> bool:
        if isinstance(other, SortItem):
            return _sort_key(self.key) < _sort_key(other.key)
        return super().__lt__(other)


def _sort_key(key) -> tuple:
    if key is None:
        return (0, 0.0, "")
    if isinstance(key, str):
        return (1, 0.0, key.casefold())
    return (1, float(key), "")


def group_cells(group: GroupStats) -> list[tuple[str, object]]:
    """(text, sort key) per GROUP_COLUMNS column."""
    a = group.aggregate
    drafted = a.draft_proposed > 0
    return [(group.label, group.label), (f"{a.runs:,}", a.runs), (f"{a.new_tokens:,}", a.new_tokens),
            (f"{a.tokens_per_s:.1f}", a.tokens_per_s),
            (_speedup_text(a.mean_speedup), a.mean_speedup),
            (f"{a.mean_alpha:.2f}" if drafted else "–", a.mean_alpha if drafted else None),
            (f"{a.tau:.2f}" if a.target_passes else "–", a.tau if a.target_passes else None),
            (_local(group.first_at), group.first_at.timestamp() if group.first_at else None),
            (_local(group.last_at), group.last_at.timestamp() if group.last_at else None)]


# --- the benchmark ------------------------------------------------------------------------------------------------

class BenchmarkProgress(QObject):
    """Carries the runner's progress from its thread to the window (a queued signal, so thread safe)."""

    progress = Signal(int, int, str)  # prompt-modes done, in all, what was just measured


@dataclass
class BenchmarkRun:
    """A running benchmark: what the results are stored with, and how to stop it."""

    worker: CallWorker  # runs on the session's model thread
    cancel: threading.Event
    pair: ModelPair  # the pair it measures (the session may load another meanwhile)
    settings: BenchSettings
    modes: list[str]
    records: list | None = None  # set by the worker thread when the runner returns


BENCH_MODE_NAMES = {"none": "plain decoding", "pld": "prompt lookup", "model": "the draft model",
                    "hybrid": "the hybrid drafter (draft model + prompt lookup)", "eagle": "the draft head",
                    "eagle-hybrid": "the draft head + prompt lookup"}


def _suite_description() -> str:
    try:
        prompts = load_prompts(*_prompt_lines(None))
    except SpecchatError:  # a damaged install: the benchmark itself will say what is wrong
        return "Spec-Bench format"
    return f"{len(prompts)} prompts in {len({p.category for p in prompts})} categories"


def benchmark_modes(drafter: str) -> list[str]:
    """Plain decoding (the baseline of every speedup) and the drafter chosen in Settings."""
    return ["none"] if drafter == "none" else ["none", drafter]


class BenchmarkDialog(QDialog):
    """Which prompts, how many, and how long the replies may be."""

    def __init__(self, modes: list[str], where: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Run a benchmark — specchat")
        names = " and ".join(BENCH_MODE_NAMES.get(m, m) for m in modes)
        intro = QLabel(f"Each prompt is decoded greedily with <b>{html.escape(names)}</b>, one after the other on "
                       f"<b>{html.escape(where)}</b>. The speedup is measured against plain decoding of the same "
                       "prompt; the results are stored as benchmark runs.")
        intro.setWordWrap(True)
        self.suite = QRadioButton(f"Shipped prompt suite ({_suite_description()})")
        self.file = QRadioButton("Your JSONL file in Spec-Bench format:")
        self.suite.setChecked(True)
        choice = QButtonGroup(self)
        choice.addButton(self.suite)
        choice.addButton(self.file)
        self.path = QLineEdit(placeholderText="prompts.jsonl")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        file_row = QHBoxLayout()
        file_row.setContentsMargins(24, 0, 0, 0)
        file_row.addWidget(self.path, 1)
        file_row.addWidget(browse)
        self.limit = QSpinBox(minimum=0, maximum=100_000, value=DEFAULT_BENCH_PROMPTS)
        self.limit.setSpecialValueText("all")
        self.limit.setToolTip("The first N prompts of the file; 0 = all of them")
        self.max_tokens = QSpinBox(minimum=8, maximum=4096, value=DEFAULT_BENCH_TOKENS, singleStep=32)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        form.addRow("Prompts:", self.limit)
        form.addRow("Max tokens per reply:", self.max_tokens)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Run benchmark")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.path.textEdited.connect(lambda: self.file.setChecked(True))
        for signal in (self.file.toggled, self.path.textChanged):
            signal.connect(self._update_ok)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addSpacing(6)
        layout.addWidget(self.suite)
        layout.addWidget(self.file)
        layout.addLayout(file_row)
        layout.addLayout(form)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(540)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Prompts in Spec-Bench format", "",
                                              "JSON Lines (*.jsonl *.json);;All files (*)")
        if path:
            self.path.setText(path)
            self.file.setChecked(True)

    def _update_ok(self) -> None:
        ok = not self.file.isChecked() or bool(self.path.text().strip())
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)

    def choice(self) -> tuple[str | None, int, int]:
        """(prompts file or None for the shipped suite, prompt limit (0 = all), max new tokens)."""
        path = self.path.text().strip() if self.file.isChecked() else None
        return path or None, self.limit.value(), self.max_tokens.value()


# --- the window ---------------------------------------------------------------------------------------------------

class DashboardWindow(QWidget):
    """Charts, figures and exports of the stored runs, filtered by date, models, drafter and source."""

    benchmark_finished = Signal()  # the benchmark ended (stored, cancelled or failed) and the device is free

    def __init__(self, session, parent=None):
        super().__init__(parent, Qt.WindowType.Window)
        self.session = session
        self.setWindowTitle("Statistics — specchat")
        self.runs: list[RunRow] = []
        self.groups: list[GroupStats] = []
        self.summary = RunAggregate()
        self._benchmark: BenchmarkRun | None = None
        self._bench_progress = BenchmarkProgress(self)
        self._bench_progress.progress.connect(self._on_benchmark_progress, Qt.ConnectionType.QueuedConnection)
        self._build()
        self._stale = False
        session.stats_changed.connect(self._on_stats_changed)
        session.status_changed.connect(self._update_actions)
        self._update_actions()
        self.resize(1200, 800)

    # -- layout ---------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(12, 10, 12, 10)
        root.setSpacing(8)
        root.addLayout(self._build_header())
        root.addLayout(self._build_filters())
        root.addLayout(self._build_cards())
        self.message = QLabel(wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.message.hide()
        root.addWidget(self.message)
        root.addWidget(self._build_bench_panel())
        self.content = QStackedWidget()
        self.content.addWidget(self._build_charts_and_table())
        self.empty_state = QLabel(alignment=Qt.AlignmentFlag.AlignCenter, wordWrap=True)
        self.content.addWidget(self.empty_state)
        root.addWidget(self.content, 1)
        self.addAction(QAction(self, shortcut=QKeySequence("Ctrl+W"), triggered=self.close))
        self.addAction(QAction(self, shortcut=QKeySequence(QKeySequence.StandardKey.Refresh),
                               triggered=self.refresh))

    def _build_header(self) -> QHBoxLayout:
        title = QLabel("Statistics")
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        title.setFont(font)
        self.subtitle = QLabel("every chat reply, race lane and benchmark prompt, from the chat database")
        self.subtitle.setStyleSheet(f"color: {current_theme().muted_text.name()}")
        # on a narrow window the subtitle is cut rather than the buttons pushed off
        self.subtitle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.bench_button = QPushButton("▶  Run benchmark…")
        self.bench_button.setToolTip("Measure plain decoding and the chosen drafter on a prompt suite")
        self.bench_button.clicked.connect(self.open_benchmark_dialog)
        self.csv_button = QPushButton("Export CSV…")
        self.csv_button.setToolTip("One row per run in the current selection")
        self.csv_button.clicked.connect(self._ask_export_csv)
        self.json_button = QPushButton("Export JSON…")
        self.json_button.setToolTip("The filters, summary, groups and runs of the current selection")
        self.json_button.clicked.connect(self._ask_export_json)
        self.png_button = QPushButton("Save charts as PNG…")
        self.png_button.clicked.connect(self._ask_save_charts)
        row = QHBoxLayout()
        row.addWidget(title)
        row.addSpacing(10)
        row.addWidget(self.subtitle, 1, Qt.AlignmentFlag.AlignBottom)
        for button in (self.bench_button, self.csv_button, self.json_button, self.png_button):
            row.addWidget(button)
        return row

    def _build_filters(self) -> QHBoxLayout:
        self.range_combo = self._combo([(text, data) for text, data in RANGES])
        self.from_date = self._date_edit()
        self.to_date = self._date_edit()
        self.pair_combo = self._combo([("All model pairs", None)], minimum_chars=14)
        self.drafter_combo = self._combo([("All drafters", None)])
        self.source_combo = self._combo(list(SOURCES))
        self.group_combo = self._combo(list(GROUPINGS))
        self.range_combo.currentIndexChanged.connect(self.refresh)
        for edit in (self.from_date, self.to_date):
            edit.dateChanged.connect(self._on_date_edited)
        for combo in (self.pair_combo, self.drafter_combo, self.source_combo, self.group_combo):
            combo.currentIndexChanged.connect(self.refresh)
        self.range_combo.setToolTip("The period of the runs shown; picking a date switches to custom dates")
        row = QHBoxLayout()
        row.setSpacing(14)
        for label, widgets in ((None, (self.range_combo, self.from_date, QLabel("–"), self.to_date)),
                               ("Models", (self.pair_combo,)), ("Drafter", (self.drafter_combo,)),
                               ("Source", (self.source_combo,)), ("Group by", (self.group_combo,))):
            group = QHBoxLayout()
            group.setSpacing(4)
            if label:
                group.addWidget(QLabel(f"{label}:"))
            for widget in widgets:
                group.addWidget(widget)
            row.addLayout(group)
        row.addStretch(1)
        return row

    def _combo(self, items: list[tuple[str, object]], minimum_chars: int = 0) -> QComboBox:
        combo = QComboBox()
        for text, data in items:
            combo.addItem(text, data)
        if minimum_chars:  # long model names must not push the other filters off the window
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(minimum_chars)
        return combo

    def _date_edit(self) -> QDateEdit:
        edit = QDateEdit(calendarPopup=True, displayFormat="d MMM yyyy")
        edit.setDate(QDate.currentDate())
        return edit

    def _build_cards(self) -> QHBoxLayout:
        specs = (("runs", "Runs", "Generation runs in the selection"),
                 ("tokens", "Tokens", "New tokens generated, and the generation time they took"),
                 ("speedup", "Mean speedup", ("Mean of the runs' speedups over plain decoding (measured in races "
                                              "and benchmarks, against the calibrated plain speed in chat)")),
                 ("tokens_per_s", "Tokens / s", "All tokens divided by all generation time"),
                 ("alpha", "Acceptance α", "Accepted draft tokens / proposed draft tokens"),
                 ("tau", "Tokens per pass τ", "New tokens per target model forward pass"))
        self.cards = {key: SummaryCard(caption, tip) for key, caption, tip in specs}
        self.setStyleSheet("QFrame#card { background: palette(alternate-base); border: 1px solid palette(mid); "
                           "border-radius: 8px; }")
        row = QHBoxLayout()
        row.setSpacing(8)
        for card in self.cards.values():
            row.addWidget(card)
        return row

    def _build_bench_panel(self) -> QFrame:
        self.bench_panel = QFrame(objectName="card")
        self.bench_label = QLabel("<b>Benchmark</b>")
        self.bench_bar = QProgressBar()
        self.bench_bar.setTextVisible(True)
        self.bench_cancel = QPushButton("Cancel")
        self.bench_cancel.setToolTip("Stop after the prompt being measured; the finished prompts are stored")
        self.bench_cancel.clicked.connect(self.cancel_benchmark)
        layout = QHBoxLayout(self.bench_panel)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.bench_label)
        layout.addWidget(self.bench_bar, 1)
        layout.addWidget(self.bench_cancel)
        self.bench_panel.hide()
        return self.bench_panel

    def _build_charts_and_table(self) -> QSplitter:
        self.timeline = TimelineChart()
        self.acceptance = GroupBarsChart("Acceptance by draft position", CHART_FILES[1], "draft position",
                                         "acceptance rate", percent=False)
        self.lengths = GroupBarsChart("Accepted draft tokens per step", CHART_FILES[2], "draft tokens accepted",
                                      "% of draft steps", percent=True)
        self.groups_chart = GroupsChart()
        self.chart_views: list[ChartView] = [self.timeline, self.acceptance, self.lengths, self.groups_chart]
        grid_widget = QWidget()
        grid = QGridLayout(grid_widget)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(8)
        for index, view in enumerate(self.chart_views):
            grid.addWidget(view, index // 2, index % 2)
        self.group_table = QTableWidget(0, len(GROUP_COLUMNS))
        self.group_table.setHorizontalHeaderLabels(GROUP_COLUMNS)
        self.group_table.verticalHeader().setVisible(False)
        self.group_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.group_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.group_table.setAlternatingRowColors(True)
        header = self.group_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # the charts' order until a header is clicked
        for column in range(1, len(GROUP_COLUMNS)):
            self.group_table.horizontalHeaderItem(column).setTextAlignment(
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(grid_widget)
        splitter.addWidget(self.group_table)
        splitter.setStretchFactor(0, 1)
        splitter.setSizes([560, 160])
        return splitter

    # -- filters --------------------------------------------------------------------------------------------------

    def current_filter(self) -> RunFilter:
        since, until = self._period()
        pair = self.pair_combo.currentData()
        target, draft = pair if pair else (None, None)
        return RunFilter(since=since, until=until, target=target, draft=draft,
                         drafter=self.drafter_combo.currentData(), source=self.source_combo.currentData())

    def grouping(self) -> str:
        return self.group_combo.currentData()

    def _period(self) -> tuple[datetime | None, datetime | None]:
        """(since, until) as aware datetimes; the dates are local calendar days, the end day included."""
        choice = self.range_combo.currentData()
        if choice == ALL_TIME:
            return None, None
        if choice == CUSTOM_DATES:
            return (local_day_start(self.from_date.date().toPython()),
                    local_day_start(self.to_date.date().toPython() + timedelta(days=1)))
        return local_day_start(date.today() - timedelta(days=choice - 1)), None

    def _on_date_edited(self) -> None:
        """Picking a date means the user wants those dates, whatever preset was chosen before."""
        custom = self.range_combo.findData(CUSTOM_DATES)
        if self.range_combo.currentIndex() != custom:
            self.range_combo.blockSignals(True)
            self.range_combo.setCurrentIndex(custom)
            self.range_combo.blockSignals(False)
        self.refresh()

    def _show_period_dates(self) -> None:
        """For the presets, the date edits show the period they stand for (all time: first run to today)."""
        choice = self.range_combo.currentData()
        if choice == CUSTOM_DATES:
            return
        today = date.today()
        if choice == ALL_TIME:
            start = self.runs[0].created_at.astimezone().date() if self.runs else today
        else:
            start = today - timedelta(days=choice - 1)
        for edit, day in ((self.from_date, start), (self.to_date, today)):
            edit.blockSignals(True)
            edit.setDate(QDate(day.year, day.month, day.day))
            edit.blockSignals(False)

    def _reload_choices(self) -> None:
        """The pairs and drafters that exist in the database (a benchmark may have added some)."""
        choices = self.session.store.run_choices()
        _refill(self.pair_combo, pair_choices(choices["pairs"]))
        drafters = sorted(choices["drafters"], key=_drafter_rank)
        _refill(self.drafter_combo, [("All drafters", None)] + [(DRAFTER_NAMES.get(d, d), d) for d in drafters])

    # -- showing --------------------------------------------------------------------------------------------------

    def _on_stats_changed(self) -> None:
        """New runs: redraw now if the window is open, else when it is shown (a hidden dashboard need not reload
        every run after every chat reply)."""
        if self.isVisible():
            self.refresh()
        else:
            self._stale = True

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def refresh(self) -> None:
        """Read the runs matching the filters and redraw everything."""
        self._stale = False
        try:
            self._reload_choices()
            where, by = self.current_filter(), self.grouping()
            self.runs = self.session.store.runs(where)
            self.groups = self.session.store.run_groups(by, where)
        except StorageError as error:
            self._say(f"The statistics could not be read: {error}", "error")
            return
        self.summary = RunAggregate.of(self.runs)
        self._show_period_dates()
        self._show_summary()
        self._show_charts()
        self._show_table()
        self._show_empty_state()
        self._update_actions()

    def _show_summary(self) -> None:
        s, cards = self.summary, self.cards
        if not s.runs:
            for card in cards.values():
                card.show_value("–")
            cards["runs"].show_value("0", "no runs in this selection")
            return
        sources = Counter(r.source for r in self.runs)
        cards["runs"].show_value(f"{s.runs:,}", " · ".join(f"{sources[k]} {k}" for k in ("chat", "race", "bench")
                                                            if sources[k]))
        cards["tokens"].show_value(f"{s.new_tokens:,}", f"in {format_duration(s.wall_s)}")
        measured = sum(1 for r in self.runs if r.speedup is not None)
        cards["speedup"].show_value(_speedup_text(s.mean_speedup),
                                    f"over {_count(measured, 'run')} with a baseline"
                                    if measured else "no run has a baseline")
        cards["tokens_per_s"].show_value(f"{s.tokens_per_s:.1f}", "all tokens / all time")
        drafted = s.draft_proposed > 0
        cards["alpha"].show_value(f"{s.mean_alpha:.2f}" if drafted else "–",
                                  f"{s.draft_accepted:,} of {s.draft_proposed:,} drafts" if drafted
                                  else "no drafted tokens")
        cards["tau"].show_value(f"{s.tau:.2f}" if s.target_passes else "–",
                                f"{s.target_passes:,} target passes" if s.target_passes else "")

    def _show_charts(self) -> None:
        self.timeline.show_runs(self.runs)
        shown = chart_groups(self.groups, self.grouping())
        colours, labels = group_colours(shown), chart_labels(shown, self.grouping())
        drafted = [g for g in shown if g.proposed_by_position and g.proposed_by_position[0]]
        no_drafts = "No drafted tokens in this selection (plain decoding proposes none)"
        positions = min(MAX_POSITIONS, max((len(g.proposed_by_position) for g in drafted), default=0))
        self.acceptance.show_bars(
            [str(i) for i in range(1, positions + 1)],
            [(short_label(labels[g.key]), colours[g.key], _padded(g.acceptance_by_position, positions))
             for g in drafted],
            1.0, no_drafts)
        lengths = {g.key: accepted_length_distribution(g.proposed_by_position, g.accepted_by_position)
                   for g in drafted}
        longest = min(MAX_POSITIONS + 1, max((len(v) for v in lengths.values()), default=0))
        highest = max((100 * x for v in lengths.values() for x in v), default=100.0)
        step = 10 if highest <= 55 else 20  # ticks on round percentages
        top = min(100.0, _round_up(highest * 1.08, step))
        self.lengths.show_bars(
            [str(j) for j in range(longest)],
            [(short_label(labels[g.key]), colours[g.key], [100 * x for x in _padded(lengths[g.key], longest)])
             for g in drafted], top, no_drafts, ticks=int(top // step) + 1)
        self.groups_chart.show_groups(shown, labels)
        hidden = len(self.groups) - len(shown)
        suffix = f" (the {len(shown)} largest of {len(self.groups)} groups)" if hidden > 0 else ""
        self.acceptance.chart().setTitle("Acceptance by draft position" + suffix)
        self.lengths.chart().setTitle("Accepted draft tokens per step" + suffix)
        self.groups_chart.chart().setTitle("Mean speedup and speed per group" + suffix)

    def _show_table(self) -> None:
        table = self.group_table
        table.setSortingEnabled(False)  # filling a sorted table moves rows while they are written
        table.setRowCount(len(self.groups))
        bold = QFont(table.font())
        bold.setBold(True)
        for row, group in enumerate(reading_order(self.groups, self.grouping())):
            for column, (text, key) in enumerate(group_cells(group)):
                item = SortItem(text, key)
                item.setToolTip(group.label if column == 0 else "")
                if column:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if column == 4 and group.aggregate.mean_speedup is not None:
                    item.setFont(bold)
                table.setItem(row, column, item)
        table.setSortingEnabled(True)

    def _show_empty_state(self) -> None:
        if self.runs:
            self.content.setCurrentIndex(0)
            return
        any_filter = self.current_filter() != RunFilter()
        hint = ("No runs match these filters — chat, race or run a benchmark" if any_filter
                else "No runs yet — chat, race or run a benchmark, and the statistics appear here")
        muted = current_theme().muted_text.name()
        self.empty_state.setText(f"<p style='font-size:15pt'>{html.escape(hint)}</p>"
                                 f"<p style='color:{muted}'>Every reply's speed and acceptance are stored as it "
                                 "is generated.</p>")
        self.content.setCurrentWidget(self.empty_state)

    def _update_actions(self) -> None:
        running = self._benchmark is not None
        self.bench_button.setEnabled(not running and self.session.ready)
        self.bench_button.setToolTip("Measure plain decoding and the chosen drafter on a prompt suite"
                                     if self.session.ready else "The models are still loading")
        has_runs = bool(self.runs)
        for button in (self.csv_button, self.json_button, self.png_button):
            button.setEnabled(has_runs)

    def _say(self, text: str, tone: str = "info") -> None:
        """A line under the figures: what happened (an export, a benchmark) or what went wrong, never a traceback."""
        if not text:
            self.message.hide()
            return
        dark = current_theme().dark
        colour = {"error": "#f28b82" if dark else "#b3261e", "success": "#81c995" if dark else "#2e7d32"}.get(tone)
        body = html.escape(text)
        self.message.setText(f"<span style='color:{colour}'>{body}</span>" if colour else body)
        self.message.show()

    # -- exports --------------------------------------------------------------------------------------------------

    def _ask_export_csv(self) -> None:
        path = self._ask_save_path("Export runs as CSV", "csv", "CSV files (*.csv)")
        if path:
            self.export_csv(path)

    def _ask_export_json(self) -> None:
        path = self._ask_save_path("Export statistics as JSON", "json", "JSON files (*.json)")
        if path:
            self.export_json(path)

    def _ask_save_path(self, title: str, suffix: str, kinds: str) -> str:
        name = str(Path.home() / f"specchat-runs-{date.today():%Y%m%d}.{suffix}")
        path, _ = QFileDialog.getSaveFileName(self, title, name, kinds)
        return path

    def _ask_save_charts(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save the charts as PNG into", str(Path.home()))
        if folder:
            self.save_charts(folder)

    def export_csv(self, path: str | Path) -> bool:
        """One row per run of the current selection, with a header (CSV_COLUMNS)."""
        try:
            with open(path, "w", newline="", encoding="utf-8") as file:
                writer = csv.writer(file)
                writer.writerow(CSV_COLUMNS)
                writer.writerows(csv_row(run) for run in self.runs)
        except OSError as error:
            self._say(f"Could not write {path}: {error.strerror or error}", "error")
            return False
        self._say(f"Exported {len(self.runs)} runs to {path}", "success")
        return True

    def export_json(self, path: str | Path) -> bool:
        """The current selection: its filters, summary, groups (as charted and tabled) and runs."""
        data = {"app": f"specchat {__version__}", "exported_at": datetime.now(timezone.utc).isoformat(),
                "filters": self.filter_description(), "summary": dataclasses.asdict(self.summary),
                "groups": [group_to_json(g) for g in self.groups], "runs": [run_to_json(r) for r in self.runs]}
        try:
            Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        except OSError as error:
            self._say(f"Could not write {path}: {error.strerror or error}", "error")
            return False
        self._say(f"Exported {len(self.runs)} runs and {len(self.groups)} groups to {path}", "success")
        return True

    def filter_description(self) -> dict:
        where = self.current_filter()
        return {"period": self.range_combo.currentText(),
                "since": where.since.isoformat() if where.since else None,
                "until": where.until.isoformat() if where.until else None,
                "target": where.target, "draft": where.draft, "drafter": where.drafter, "source": where.source,
                "group_by": self.grouping()}

    def save_charts(self, folder: str | Path) -> list[Path]:
        """Each chart as a PNG in `folder` (created if missing); the paths written, [] after an error."""
        if not self.runs:
            self._say("No runs match these filters: there are no charts to save.", "error")
            return []
        folder = Path(folder)
        paths = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self._say(f"Could not create {folder}: {error.strerror or error}", "error")
            return []
        for view in self.chart_views:
            path = folder / view.file_name
            if not view.grab().save(str(path), "PNG"):  # as shown, at the window's size
                self._say(f"Could not write {path} (is the folder writable?)", "error")
                return []
            paths.append(path)
        self._say(f"Saved {len(paths)} charts to {folder}", "success")
        return paths

    # -- benchmark ------------------------------------------------------------------------------------------------

    def benchmark_running(self) -> bool:
        return self._benchmark is not None

    def _benchmark_problem(self) -> str | None:
        """Why a benchmark cannot start now, or None."""
        session = self.session
        if self._benchmark is not None:
            return "A benchmark is already running."
        if not session.ready:
            return "The models are still loading; run the benchmark when they are ready."
        if session.device_busy():
            return ("The models are busy (a chat reply or a race is being generated); run the benchmark when it "
                    "has finished.")
        if session.settings.drafter in MODEL_DRAFTERS and session.pair.draft is None:
            return (f"The {DRAFTER_NAMES[session.settings.drafter]} drafter needs a draft model: choose one in "
                    "Settings.")
        if session.settings.drafter in HEAD_DRAFTERS and not session.pair.has_head:
            return f"The {DRAFTER_NAMES[session.settings.drafter]} drafter needs a draft head for this target."
        return None

    def open_benchmark_dialog(self) -> None:
        problem = self._benchmark_problem()
        if problem:
            self._say(problem, "error")
            return
        dialog = BenchmarkDialog(benchmark_modes(self.session.settings.drafter),
                                 str(self.session.pair.target.device), self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.start_benchmark(*dialog.choice())

    def start_benchmark(self, prompts_path: str | Path | None = None, limit: int = DEFAULT_BENCH_PROMPTS,
                        max_new_tokens: int = DEFAULT_BENCH_TOKENS) -> bool:
        """Run the benchmark in the background (prompts_path None: the shipped suite; limit 0: every prompt).
        False, with a message in the window, when it cannot start."""
        problem = self._benchmark_problem()
        if problem:
            self._say(problem, "error")
            return False
        try:
            lines, source = _prompt_lines(prompts_path)
            prompts = load_prompts(lines, source, limit or None)
        except SpecchatError as error:
            self._say(f"The benchmark cannot start: {error}", "error")
            return False
        session = self.session
        settings = BenchSettings(k=session.settings.k, adaptive=session.settings.adaptive_k,
                                 max_new_tokens=max_new_tokens, repeats=1)
        modes = benchmark_modes(session.settings.drafter)
        self._launch_benchmark(BenchRunner(session.pair, settings), prompts, modes, settings)
        return True

    def _launch_benchmark(self, runner, prompts, modes: list[str], settings) -> None:
        cancel = threading.Event()
        report = self._bench_progress.progress.emit

        def progress(done: int, total: int, record) -> None:  # called on the worker thread
            mode = DRAFTER_NAMES.get(record.mode, record.mode)
            report(done, total, f"q{record.question_id} {record.category} · {mode}")

        def work():
            bench.records = runner.run(prompts, modes, progress=progress, cancel=cancel)
            return bench.records

        worker = CallWorker(work, cancel, if_not_run=[])  # also cancelled when the session shuts down
        bench = BenchmarkRun(worker, cancel, self.session.pair, settings, modes)
        # Bound methods of this window (not lambdas): Qt then queues the calls to the GUI thread.
        worker.done.connect(self._on_benchmark_done)
        worker.failed.connect(self._on_benchmark_failed)
        self._benchmark = bench
        self.session.claim_device(BENCH_DEVICE_USER)
        self.bench_bar.setRange(0, len(prompts) * len(modes))
        self.bench_bar.setValue(0)
        self.bench_bar.setFormat(f"warming up · {len(prompts)} prompts × {len(modes)} modes")
        self.bench_cancel.setEnabled(True)
        self.bench_panel.show()
        self._say("")
        self._update_actions()
        self.session.model_thread.submit(worker)

    @Slot(int, int, str)
    def _on_benchmark_progress(self, done: int, total: int, what: str) -> None:
        if self._benchmark is None:  # a late report after the window closed the run
            return
        self.bench_bar.setRange(0, total)
        self.bench_bar.setValue(done)
        self.bench_bar.setFormat(f"{done} / {total} · {what}")

    def cancel_benchmark(self) -> None:
        """Stop after the prompt-mode being measured; the prompts finished in every mode are stored."""
        if self._benchmark is not None:
            self._benchmark.cancel.set()
            self.bench_cancel.setEnabled(False)
            self.bench_bar.setFormat(self.bench_bar.format() + " · cancelling…")

    def _reporting_run(self) -> BenchmarkRun | None:
        """The running benchmark if it is the one whose worker reports (not one that closeEvent already ended)."""
        bench = self._benchmark
        return bench if bench is not None and self.sender() is bench.worker else None

    @Slot(object)
    def _on_benchmark_done(self, records: list) -> None:
        if self._reporting_run() is not None:
            self._finish_benchmark(records)

    @Slot(str)
    def _on_benchmark_failed(self, message: str) -> None:
        if self._reporting_run() is None:
            return
        self._end_benchmark()
        self._say(f"The benchmark failed: {message}", "error")
        self.benchmark_finished.emit()

    def _finish_benchmark(self, records: list) -> None:
        bench = self._benchmark
        cancelled = bench.cancel.is_set()
        self._end_benchmark()
        try:
            stored = self._store_benchmark(bench, records)
        except StorageError as error:
            self._say(f"The benchmark ran but its runs could not be stored: {error}", "error")
            self.benchmark_finished.emit()
            return
        prompts = len({r.question_id for r in records})
        if stored:
            self.session.stats_changed.emit()  # the dashboard and the main window's figures refresh
        if cancelled and not prompts:
            self._say("Benchmark cancelled before a prompt finished in every mode: nothing stored.")
        else:
            self._say(f"Benchmark{' cancelled' if cancelled else ''}: {_count(prompts, 'prompt')} × "
                      f"{_count(len(bench.modes), 'mode')} stored", "success")
        self.benchmark_finished.emit()

    def _store_benchmark(self, bench: BenchmarkRun, records: list) -> int:
        stored = 0
        for record in records:
            values = bench_run_values(record, bench.pair, bench.settings, self.session.app_session_id)
            if values is not None:
                self.session.store.record_run(values)
                stored += 1
        return stored

    def _end_benchmark(self) -> None:
        bench, self._benchmark = self._benchmark, None
        if bench is not None:
            self.session.release_device(BENCH_DEVICE_USER)
        self.bench_panel.hide()
        self._update_actions()

    def closeEvent(self, event) -> None:
        """Cancels a running benchmark and closes at once: the runner stops after the prompt-mode it is in, and its
        end (the prompts it finished, stored then) arrives as usual while the window is hidden. Waiting for it here
        blocked the whole app for as long as that prompt-mode took, up to minutes on a slow device."""
        if self._benchmark is not None:
            self.cancel_benchmark()
        super().closeEvent(event)


# --- helpers ------------------------------------------------------------------------------------------------------

def pair_choices(pairs: Sequence[tuple[str, str | None]]) -> list[tuple[str, object]]:
    """Combo items for the model pairs: every (target, draft), and "any draft" for a target that has several
    (plain and prompt-lookup runs record no draft model, so a pair alone would hide them)."""
    items: list[tuple[str, object]] = [("All model pairs", None)]
    by_target: dict[str, list[str | None]] = {}
    for target, draft in pairs:
        by_target.setdefault(target, []).append(draft)
    for target, drafts in by_target.items():
        if len(drafts) > 1:
            items.append((f"{target} · any draft", (target, None)))
        for draft in drafts:
            items.append((f"{target} + {draft}" if draft else f"{target} · no draft model", (target, draft or "")))
    return items


def _refill(combo: QComboBox, items: list[tuple[str, object]]) -> None:
    """Replace the items, keeping the current choice when it still exists, without emitting a change."""
    current = combo.currentData()
    combo.blockSignals(True)
    combo.clear()
    for text, data in items:
        combo.addItem(text, data)
        combo.setItemData(combo.count() - 1, text, Qt.ItemDataRole.ToolTipRole)
    index = next((i for i in range(combo.count()) if combo.itemData(i) == current), 0)
    combo.setCurrentIndex(index)
    combo.blockSignals(False)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _padded(values: Sequence[float], length: int) -> list[float]:
    return list(values[:length]) + [0.0] * (length - len(values))


def _round_up(value: float, step: float) -> float:
    return step * -(-value // step)


def _prompt_lines(path: str | Path | None) -> tuple[list[str], str]:
    """The prompt file's lines and how to name it in messages; the shipped suite when `path` is None."""
    if path is None:
        return default_prompt_suite().read_text(encoding="utf-8").splitlines(), "the shipped suite"
    try:
        return Path(path).read_text(encoding="utf-8").splitlines(), Path(path).name
    except (OSError, UnicodeDecodeError) as error:
        raise PromptError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from error
