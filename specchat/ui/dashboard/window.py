"""The dashboard window: the filters, summary cards, charts and groups table of the stored runs, their exports
(CSV, JSON, PNG), and the benchmark panel (whose workings are in benchmark.py)."""

from __future__ import annotations

import csv
import dataclasses
import html
import json
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from PySide6.QtCore import QDate, Qt
from PySide6.QtGui import QAction, QFont, QKeySequence
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDateEdit, QFileDialog, QFrame, QGridLayout, QHBoxLayout,
                               QHeaderView, QLabel, QPushButton, QSizePolicy, QSplitter, QStackedWidget, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from ... import __version__
from ...core.errors import StorageError
from ...core.formatting import format_duration
from ...core.vocabulary import drafter_kind
from ...storage.records import GroupStats, RunAggregate, RunFilter, RunRow
from ..layouts import stacked
from ..plain import plain_tip
from ..theme import current_theme
from .benchmark import BenchmarkHost, BenchmarkProgress, BenchmarkRun
from .charts import ChartView, GroupBarsChart, GroupsChart, TimelineChart
from .stats import (ALL_TIME, CHART_FILES, CSV_COLUMNS, CUSTOM_DATES, GROUP_COLUMNS, GROUPINGS, MAX_POSITIONS, RANGES,
                    SOURCES, _count, _drafter_rank, _padded, _round_up, _sort_key, _speedup_text,
                    accepted_length_distribution, chart_groups, chart_labels, csv_row, group_cells, group_colours,
                    group_to_json, local_day_start, pair_choices, reading_order, run_to_json, short_label)

# --- summary cards and the groups table ---------------------------------------------------------------------------

class SummaryCard(QFrame):
    """One headline figure: a caption, the value, and a line saying what it is."""

    def __init__(self, caption: str, tooltip: str, parent=None):
        super().__init__(parent)
        self.setObjectName("card")
        self.setToolTip(tooltip)
        self.caption = QLabel(caption)
        self.value = QLabel("–", textFormat=Qt.TextFormat.PlainText)
        self.detail = QLabel("", textFormat=Qt.TextFormat.PlainText)  # may name a model, a remote one included
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
        stacked(self, self.caption, self.value, self.detail, margins=(12, 8, 12, 8), spacing=1)
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


# --- the window ---------------------------------------------------------------------------------------------------

class DashboardWindow(BenchmarkHost):
    """Charts, figures and exports of the stored runs, filtered by date, models, drafter and source."""

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
                                              "and benchmarks; in chat against the reply's own plain steps, or "
                                              "the calibrated plain speed where it had too few)")),
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
        choices = self.session.runs.choices()
        _refill(self.pair_combo, pair_choices(choices["pairs"]))
        drafters = sorted(choices["drafters"], key=_drafter_rank)
        _refill(self.drafter_combo, [("All drafters", None)] + [(drafter_kind(d).chart_label, d) for d in drafters])

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
            self.runs = self.session.runs.find(where)
            self.groups = self.session.runs.grouped(by, where)
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
        kinds = ("chat", "race", "bench", "api")
        cards["runs"].show_value(f"{s.runs:,}", " · ".join(f"{sources[k]} {k}" for k in kinds if sources[k]))
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
                item.setToolTip(plain_tip(text) if column == 0 else "")
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

    # -- benchmark (the rest is BenchmarkHost's) ------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        """Cancels a running benchmark and closes at once: the runner stops after the prompt-mode it is in, and its
        end (the prompts it finished, stored then) arrives as usual while the window is hidden. Waiting for it here
        blocked the whole app for as long as that prompt-mode took, up to minutes on a slow device."""
        if self._benchmark is not None:
            self.cancel_benchmark()
        super().closeEvent(event)


# --- helpers ------------------------------------------------------------------------------------------------------

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
