"""The race: one prompt decoded plainly and by each chosen drafter, lane by lane, then replayed side by side.

Lanes run one after the other on the same device (never at once: they would slow each other down) and stream live.
When all are done, the replay plays every lane from its recorded per-token times on one shared clock, so the
speedup is seen as well as read; the chart shows tokens over time and the table the measured figures.
"""

from __future__ import annotations

import dataclasses
import html
import random
import threading
import time

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QFont, QKeySequence, QPainter, QPen, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFrame,
                               QHBoxLayout, QHeaderView, QLabel, QListWidget, QListWidgetItem, QMenu, QMessageBox,
                               QPlainTextEdit, QPushButton, QSlider, QSpinBox, QSplitter, QTableWidget,
                               QTableWidgetItem, QTextBrowser, QVBoxLayout, QWidget)

from ..engine import Message, SpecchatError, build_prompt_ids
from ..engine.drafters import DRAFTER_LABELS, HEAD_DRAFTERS, MODEL_DRAFTERS
from ..engine.events import GenerationResult, Origin, StepEvent
from ..engine.race import PLAIN, RaceRunner, Track, all_identical, lane_results, lanes_for, word_diff
from .spans import DRAFT
from .theme import current_theme
from .transcript import DRAFT_TIP, ORIGIN_PROPERTY, TARGET_TIP, draft_positions
from .workers import RaceWorker

REPLAY_FRAME_MS = 30
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
LANE_COLOURS = ("#6b7280", "#2e8b57", "#3b6ea8", "#c2185b", "#e69500")
DEFAULT_RACE_TOKENS = 128
CLOSE_WAIT_MS = 10_000  # a stopped race ends after the lane's current step


BOX_LABELS = {"pld": "prompt lookup", "history": "+ past replies", "model": "draft model", "hybrid": "model + lookup",
              "eagle": "draft head", "eagle-hybrid": "head + lookup"}
SHORT_LABELS = {PLAIN: "plain", "pld": "lookup", "history": "history", "model": "draft model", "hybrid": "hybrid",
                "eagle": "head", "eagle-hybrid": "head hybrid"}


def lane_label(drafter: str) -> str:
    return "Plain decoding (target alone)" if drafter == PLAIN else DRAFTER_LABELS.get(drafter, drafter)


def short_label(drafter: str) -> str:
    """For the chart's legend and the table, where space is short."""
    return SHORT_LABELS.get(drafter, drafter)


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


def _origin_format(drafted: bool, theme) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setProperty(ORIGIN_PROPERTY, DRAFT if drafted else "target")
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
        name = "plain decoding" if drafter == PLAIN else BOX_LABELS.get(drafter, drafter)
        title = QLabel(f"<span style='color:{colour}'>■</span>&nbsp;<b>{html.escape(name)}</b>",
                       toolTip=lane_label(drafter))
        title.setMinimumWidth(40)
        self.status = QLabel("waiting", wordWrap=True)
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
        self._top = self.y_axis.max()
        self.cursor = QLineSeries(name="replay")
        self.cursor.setPen(QPen(theme.muted_text, 1, Qt.PenStyle.DashLine))
        chart.addSeries(self.cursor)
        self.cursor.attachAxis(self.x_axis)
        self.cursor.attachAxis(self.y_axis)
        self.set_cursor(0.0)

    def set_cursor(self, t: float) -> None:
        self.cursor.replace([QPointF(t, 0), QPointF(t, self._top)])


class DiffDialog(QDialog):
    """Where two lanes' outputs differ, word by word (red: only in the plain lane, green: only in the other)."""

    def __init__(self, plain: Track, other: Track, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Output differences: plain vs {lane_label(other.drafter)}")
        self.resize(720, 480)
        view = QTextBrowser()
        parts = []
        for op, text in word_diff(plain.text, other.text):
            text = html.escape(text).replace("\n", "<br>")
            if op == "equal":
                parts.append(text)
            elif op == "delete":
                parts.append(f"<span style='background:#fdecea;color:#7a1c16;text-decoration:line-through'>{text}</span>")
            else:
                parts.append(f"<span style='background:#d4f2dd;color:#14532d'>{text}</span>")
        view.setHtml("<p><span style='background:#fdecea'>&nbsp;only in plain&nbsp;</span>&nbsp;&nbsp;"
                     f"<span style='background:#d4f2dd'>&nbsp;only in {html.escape(other.drafter)}&nbsp;</span></p>"
                     "<p style='white-space:pre-wrap'>" + "".join(parts) + "</p>")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(view)
        layout.addWidget(buttons)


RESULT_COLUMNS = ("Lane", "Tokens", "Wall time", "Tokens/s", "Speedup", "α", "τ", "Accepted at pos. 1/2/3/4",
                  "Identical")


class RaceWindow(QWidget):
    """Side-by-side comparison of plain decoding and the drafters, with history, replay, chart and figures."""

    race_finished = Signal()  # all lanes done and the comparison saved (or the race failed / was stopped)
    replay_finished = Signal()

    def __init__(self, session, parent=None):
        super().__init__(parent, Qt.WindowType.Window)
        self.session = session
        self.setWindowTitle("Race: plain vs speculative decoding — specchat")
        self.tracks: list[Track] = []
        self.lanes: list[Lane] = []
        self.greedy = True
        self.comparison_id: int | None = None
        self._job: RaceWorker | None = None
        self._cancel: threading.Event | None = None
        self._runner: RaceRunner | None = None
        self._runner_pair = None
        self._replay_clock = 0.0
        self._replay_started: float | None = None
        self._replay_from = 0.0
        self._build()
        self._replay_timer = QTimer(self, interval=REPLAY_FRAME_MS)
        self._replay_timer.timeout.connect(self._replay_frame)
        session.status_changed.connect(self._refresh_drafter_boxes)
        self._refresh_drafter_boxes()
        self.refresh_history()
        self.resize(1200, 820)

    # -- layout ---------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        self.prompt = QPlainTextEdit(placeholderText="A prompt to race, e.g. “Explain what a hash map is.”")
        self.prompt.setMaximumHeight(70)
        self.drafter_boxes: dict[str, QCheckBox] = {}
        drafters_row = QHBoxLayout()
        drafters_row.addWidget(QLabel("Plain decoding against:"))
        for drafter in ("pld", "history", "model", "hybrid", "eagle", "eagle-hybrid"):
            box = QCheckBox(BOX_LABELS[drafter])  # short: six of them share a row with the other controls
            box.setToolTip(DRAFTER_LABELS.get(drafter, drafter))
            self.drafter_boxes[drafter] = box
            drafters_row.addWidget(box)
        drafters_row.addSpacing(12)
        drafters_row.addWidget(QLabel("Max tokens:"))
        self.max_tokens = QSpinBox(minimum=8, maximum=4096, value=DEFAULT_RACE_TOKENS, singleStep=32)
        drafters_row.addWidget(self.max_tokens)
        drafters_row.addStretch(1)
        self.race_button = QPushButton("▶  Race")
        self.race_button.setDefault(True)
        self.race_button.clicked.connect(self.start_race)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        drafters_row.addWidget(self.race_button)
        drafters_row.addWidget(self.stop_button)
        self.settings_label = QLabel()
        self.settings_label.setStyleSheet(f"color: {current_theme().muted_text.name()}")
        self.settings_label.setWordWrap(True)

        self.lane_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.lane_splitter.setChildrenCollapsible(False)

        self.play_button = QPushButton("▶ Replay")
        self.play_button.clicked.connect(self.toggle_replay)
        self.speed = QComboBox()
        for speed in SPEEDS:
            self.speed.addItem(f"{speed:g}×", speed)
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.speed.setToolTip("Replay speed (1× = real time as measured)")
        self.speed.currentIndexChanged.connect(self._on_speed_changed)
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=1000)
        self.slider.sliderMoved.connect(lambda value: self.seek(value / 1000 * self.duration()))
        self.clock_label = QLabel("0.00 s / 0.00 s")
        replay_row = QHBoxLayout()
        replay_row.addWidget(self.play_button)
        replay_row.addWidget(QLabel("Speed:"))
        replay_row.addWidget(self.speed)
        replay_row.addWidget(self.slider, 1)
        replay_row.addWidget(self.clock_label)

        self.chart = TokensChart()
        self.chart.setMinimumSize(260, 200)
        self.results = QTableWidget(0, len(RESULT_COLUMNS))
        self.results.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.results.verticalHeader().setVisible(False)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.results.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.results.horizontalHeader().setStretchLastSection(True)
        self.results.setWordWrap(False)
        self.verdict = QLabel(wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.verdict.linkActivated.connect(self._show_diff)
        results_box = QWidget()
        results_layout = QVBoxLayout(results_box)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.addWidget(self.verdict)
        results_layout.addWidget(self.results, 1)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.chart)
        bottom.addWidget(results_box)
        bottom.setSizes([290, 810])

        self.history = QListWidget()
        self.history.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.history.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.history.setStyleSheet("QListWidget::item { padding: 4px 2px; }")
        self.history.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.history.customContextMenuRequested.connect(self._history_menu)
        self.history.itemActivated.connect(self._on_history_item)
        self.history.itemClicked.connect(self._on_history_item)
        history_box = QWidget()
        history_layout = QVBoxLayout(history_box)
        history_layout.setContentsMargins(0, 0, 0, 0)
        history_layout.addWidget(QLabel("<b>Saved comparisons</b>"))
        history_layout.addWidget(self.history, 1)

        main = QWidget()
        layout = QVBoxLayout(main)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.prompt)
        layout.addLayout(drafters_row)
        layout.addWidget(self.settings_label)
        vertical = QSplitter(Qt.Orientation.Vertical)
        vertical.addWidget(self.lane_splitter)
        vertical.addWidget(bottom)
        vertical.setSizes([430, 260])
        layout.addWidget(vertical, 1)
        layout.addLayout(replay_row)

        outer = QSplitter(Qt.Orientation.Horizontal)
        outer.addWidget(history_box)
        outer.addWidget(main)
        outer.setSizes([190, 1010])
        outer.setStretchFactor(1, 1)
        root = QVBoxLayout(self)
        root.setContentsMargins(8, 8, 8, 8)
        root.addWidget(outer)
        self._set_replay_enabled(False)
        close = QAction(self, shortcut=QKeySequence("Ctrl+W"), triggered=self.close)
        self.addAction(close)

    # -- drafters -------------------------------------------------------------------------------------------------

    def _refresh_drafter_boxes(self) -> None:
        pair = self.session.pair
        has_draft = pair is not None and pair.draft is not None
        has_head = pair is not None and pair.has_head
        for drafter, box in self.drafter_boxes.items():
            usable = (drafter not in MODEL_DRAFTERS or has_draft) and (drafter not in HEAD_DRAFTERS or has_head)
            box.setEnabled(usable)
            box.setToolTip(DRAFTER_LABELS.get(drafter, drafter) if usable else
                           "Needs a draft model: choose one in Settings" if drafter in MODEL_DRAFTERS else
                           "No draft head is trained for this target")
            if not usable:
                box.setChecked(False)
        if not any(box.isChecked() for box in self.drafter_boxes.values()):
            choice = self.session.settings.drafter
            box = self.drafter_boxes.get(choice) if choice != PLAIN else None
            (box if box is not None and box.isEnabled() else self.drafter_boxes["pld"]).setChecked(True)
        self._update_settings_label()
        self._update_buttons()

    def chosen_drafters(self) -> list[str]:
        return [d for d, box in self.drafter_boxes.items() if box.isChecked() and box.isEnabled()]

    def _update_settings_label(self) -> None:
        s = self.session.settings
        sampling = "greedy" if s.temperature == 0 else f"temperature {s.temperature:g}, top-p {s.top_p:g}"
        k = "adaptive K" if s.adaptive_k else f"K = {s.k}"
        pair = self.session.pair
        models = (pair.target.name.split(" (")[0] + (f" + {pair.draft.name}" if pair.draft else "")
                  + (" + draft head" if pair.has_head else "")) if pair else "loading…"
        self.settings_label.setText(f"{models} · {sampling} · {k} · lanes run one after the other on "
                                    f"{pair.target.device if pair else 'the device'}, each after a warm-up")

    # -- racing ---------------------------------------------------------------------------------------------------

    def running(self) -> bool:
        return self._job is not None

    def start_race(self) -> None:
        text = self.prompt.toPlainText().strip()
        if self.running():
            return
        if not text:
            self._say("Write a prompt to race.")
            return
        if not self.session.ready:
            self._say("The model is still loading.")
            return
        if self.session.device_busy():
            self._say("A reply is being generated in the chat; race when it has finished.")
            return
        drafters = self.chosen_drafters()
        try:
            prompt_ids = build_prompt_ids(self.session.tokenizer, [Message("user", text)])
            runner = self._race_runner()
        except SpecchatError as error:
            self._say(str(error))
            return
        settings = self.session.settings
        seed = random.SystemRandom().randrange(2**31)  # one seed for every lane, kept with the comparison
        config = dataclasses.replace(settings.generation_config(seed=seed), max_new_tokens=self.max_tokens.value())
        self.greedy = config.sampling.temperature == 0
        self._race_settings = {"drafters": lanes_for(drafters), "max_new_tokens": config.max_new_tokens,
                               "temperature": settings.temperature, "top_p": settings.top_p,
                               "top_k": settings.top_k, "k": settings.k, "adaptive_k": settings.adaptive_k,
                               "seed": seed, "device": str(self.session.pair.target.device)}
        self._race_prompt = text
        self._settings = dataclasses.replace(settings)  # as they were when the race started
        self.comparison_id = None
        self.history.clearSelection()
        self._stop_replay()
        self.chart.expected_tokens = config.max_new_tokens
        self._set_lanes([Track(d) for d in lanes_for(drafters)])
        self.lanes[0].status.setText("warming up every lane, then running…")
        self._cancel = threading.Event()
        self._job = worker = RaceWorker(runner, prompt_ids, drafters, config, self._cancel)
        worker.step.connect(self._on_step)
        worker.lane_finished.connect(self._on_lane_finished)
        worker.finished.connect(self._on_race_finished)
        worker.failed.connect(self._on_race_failed)
        self.session.claim_device("race")
        self._update_buttons()
        self.session.model_thread.submit(worker)

    def _race_runner(self) -> RaceRunner:
        """Engines are kept between races (warmed up once) until the models change."""
        if self._runner is None or self._runner_pair is not self.session.pair:
            pair, session = self.session.pair, self.session
            # the history lane drafts from the chat's past replies (an empty index while the setting is off)
            self._runner = RaceRunner(lambda drafter: pair.engine(
                drafter, history=session.history if drafter == "history" else None))
            self._runner_pair = self.session.pair
        return self._runner

    def _on_step(self, lane: int, event: StepEvent) -> None:
        track = self.tracks[lane]
        track.add(event)
        self.lanes[lane].view.show_tokens(track, len(track.token_ids))
        stats = event.stats
        figures = f"{stats.new_tokens} tokens · {stats.tokens_per_s:.1f} tok/s"
        if track.drafter != PLAIN and stats.draft_proposed:
            figures += f" · α {stats.alpha:.2f} · τ {stats.tau:.2f}"
        self.lanes[lane].status.setText("● " + figures)
        for later in self.lanes[lane + 1:]:
            later.status.setText("waiting: lanes run one at a time")

    def _on_lane_finished(self, lane: int, result: GenerationResult) -> None:
        track = self.tracks[lane]
        track.finish(result)
        self.lanes[lane].view.show_tokens(track, len(track.token_ids))
        self.lanes[lane].status.setText(f"{len(track.token_ids)} tokens in {track.wall_s:.2f} s · "
                                        f"{track.tokens_per_s:.1f} tok/s")
        if lane + 1 < len(self.lanes):
            self.lanes[lane + 1].status.setText("running…")
        self.chart.set_tracks([t for t in self.tracks if t.finish_reason is not None])  # the lines grow lane by lane

    def _on_race_finished(self) -> None:
        self._end_race()
        done = [t for t in self.tracks if t.finish_reason is not None]
        if len(done) < len(self.tracks) or any(t.finish_reason == "cancelled" for t in done):
            self._say("Race stopped: nothing was saved.")
            for lane, track in zip(self.lanes, self.tracks):
                if track.finish_reason is None:
                    lane.status.setText("not run")
            self.race_finished.emit()
            return
        self.comparison_id = self._save()
        self.show_results()
        self.refresh_history(select=self.comparison_id)
        self.race_finished.emit()

    def _on_race_failed(self, message: str) -> None:
        self._end_race()
        self._say(message)
        self.race_finished.emit()

    def _end_race(self) -> None:
        self._job = None
        self.session.release_device("race")
        self._update_buttons()

    def stop(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    def _save(self) -> int | None:
        pair = self.session.pair
        results = lane_results(self.tracks, self.greedy)
        runs = [self._run_values(track, result) for track, result in zip(self.tracks, results)]
        try:
            return self.session.store.save_comparison(
                {"prompt": self._race_prompt, "target": pair.target.name,
                 "draft": pair.draft.name if pair.draft else None, "settings": self._race_settings,
                 "greedy": self.greedy, "identical": all_identical(self.tracks) if self.greedy else None,
                 "app_session_id": self.session.app_session_id},
                [track.to_row() for track in self.tracks], runs)
        except SpecchatError as error:
            self._say(f"The comparison could not be saved: {error}")
            return None
        finally:
            self.session.stats_changed.emit()

    def _run_values(self, track: Track, result) -> dict:
        return self.session.run_values(
            track.stats, track.drafter, self._race_settings["seed"], self._settings, speedup=result.speedup,
            speedup_basis="measured" if result.speedup else None, baseline_tokens_per_s=self.tracks[0].tokens_per_s,
            finish_reason=track.finish_reason)

    # -- results --------------------------------------------------------------------------------------------------

    def _set_lanes(self, tracks: list[Track]) -> None:
        for lane in self.lanes:
            lane.setParent(None)
            lane.deleteLater()
        self.tracks = tracks
        self.lanes = [Lane(t.drafter, LANE_COLOURS[i % len(LANE_COLOURS)]) for i, t in enumerate(tracks)]
        for lane in self.lanes:
            self.lane_splitter.addWidget(lane)
        self.lane_splitter.setSizes([1000] * len(self.lanes))
        self.results.setRowCount(0)
        self.verdict.setText("")
        self.chart.set_tracks([])
        self._set_replay_enabled(False)

    def show_results(self) -> None:
        """The table, the verdict and the chart of the current tracks; the lanes show the whole replies."""
        results = lane_results(self.tracks, self.greedy)
        self.results.setRowCount(len(results))
        for row, r in enumerate(results):
            shown = r.acceptance_by_position[:4]
            positions = " / ".join(f"{a:.2f}" for a in shown) + (" …" if len(r.acceptance_by_position) > 4 else "")
            positions = positions or "–"
            identical = "–" if r.identical is None else ("✓ yes" if r.identical else "✗ no")
            cells = (short_label(r.drafter), str(r.new_tokens), f"{r.wall_s:.2f} s",
                     f"{r.tokens_per_s:.1f}", f"{r.speedup:.2f}×" if r.speedup else "baseline",
                     f"{r.alpha:.2f}" if r.alpha is not None else "–", f"{r.tau:.2f}" if r.tau else "–",
                     positions, identical)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == 4 and r.speedup:
                    item.setFont(_bold())
                if column == 8 and r.identical is False:
                    item.setForeground(QColor("#b3261e"))
                self.results.setItem(row, column, item)
        self.verdict.setText(self._verdict_html())
        self.chart.expected_tokens = 0
        self.chart.set_tracks(self.tracks)
        for lane, track in zip(self.lanes, self.tracks):
            lane.view.show_tokens(track, len(track.token_ids))
            lane.status.setText(f"{len(track.token_ids)} tokens in {track.wall_s:.2f} s · "
                                f"{track.tokens_per_s:.1f} tok/s")
        self._set_replay_enabled(True)
        self._replay_clock = self.duration()
        self._show_clock()

    def _verdict_html(self) -> str:
        if not self.greedy:
            return ("<b>Sampled decoding:</b> the lanes are different samples of the same distribution (speculative "
                    "sampling is exact in distribution, not token by token), so their texts differ.")
        plain = self.tracks[0]
        differing = [i for i, t in enumerate(self.tracks[1:], start=1) if t.token_ids != plain.token_ids]
        if not differing:
            return (f"<span style='color:#2e7d32'><b>✓ Identical output:</b></span> every lane produced the same "
                    f"{len(plain.token_ids)} tokens as plain decoding; the speedup costs nothing in quality.")
        links = ", ".join(f"<a href='diff:{i}'>show diff with {html.escape(self.tracks[i].drafter)}</a>"
                          for i in differing)
        return (f"<span style='color:#b3261e'><b>✗ Outputs differ</b></span> from plain decoding ({links}). "
                "Greedy speculative decoding should be lossless; on some hardware, batched and single-token "
                "forward passes round differently and can flip a near-tie.")

    def identical(self) -> bool:
        return all_identical(self.tracks)

    def _show_diff(self, link: str) -> None:
        index = int(link.split(":")[1])
        DiffDialog(self.tracks[0], self.tracks[index], self).exec()

    # -- replay ---------------------------------------------------------------------------------------------------

    def duration(self) -> float:
        return max((t.wall_s for t in self.tracks), default=0.0)

    def toggle_replay(self) -> None:
        if self._replay_timer.isActive():
            self._pause_replay()
        else:
            self.play()

    def play(self) -> None:
        if not self.tracks or self.running():
            return
        if self._replay_clock >= self.duration():
            self._replay_clock = 0.0
        self._replay_from = self._replay_clock
        self._replay_started = time.perf_counter()
        self.play_button.setText("❚❚ Pause")
        self._replay_timer.start()
        self._draw_replay()

    def _pause_replay(self) -> None:
        self._replay_timer.stop()
        self.play_button.setText("▶ Replay")

    def _stop_replay(self) -> None:
        self._pause_replay()
        self._replay_clock = 0.0

    def _on_speed_changed(self) -> None:
        if self._replay_timer.isActive():  # keep the clock where it is, change only its rate from now on
            self._replay_from, self._replay_started = self._replay_clock, time.perf_counter()

    def seek(self, t: float) -> None:
        self._replay_clock = min(max(t, 0.0), self.duration())
        if self._replay_timer.isActive():
            self._replay_from, self._replay_started = self._replay_clock, time.perf_counter()
        self._draw_replay()

    def _replay_frame(self) -> None:
        speed = self.speed.currentData()
        self._replay_clock = self._replay_from + (time.perf_counter() - self._replay_started) * speed
        if self._replay_clock >= self.duration():
            self._replay_clock = self.duration()
            self._draw_replay()
            self._pause_replay()
            self.replay_finished.emit()
            return
        self._draw_replay()

    def _draw_replay(self) -> None:
        t = self._replay_clock
        for lane, track in zip(self.lanes, self.tracks):
            shown = track.tokens_at(t)
            lane.view.show_tokens(track, shown)
            state = "done" if shown == len(track.token_ids) and t >= track.wall_s else "●"
            lane.status.setText(f"{state} {shown} tokens at {min(t, track.wall_s):.2f} s")
        self.chart.set_cursor(t)
        self._show_clock()

    def _show_clock(self) -> None:
        duration = self.duration()
        self.clock_label.setText(f"{self._replay_clock:.2f} s / {duration:.2f} s")
        self.slider.blockSignals(True)
        self.slider.setValue(int(1000 * self._replay_clock / duration) if duration else 0)
        self.slider.blockSignals(False)

    def _set_replay_enabled(self, enabled: bool) -> None:
        for widget in (self.play_button, self.speed, self.slider):
            widget.setEnabled(enabled)

    # -- history --------------------------------------------------------------------------------------------------

    def refresh_history(self, select: int | None = None) -> None:
        self.history.clear()
        for info in self.session.store.list_comparisons():
            when = info.created_at.astimezone().strftime("%d %b %H:%M")
            first_line = info.prompt.splitlines()[0][:40] if info.prompt else ""
            mark = "" if info.identical is None else (" ✓" if info.identical else " ✗")
            item = QListWidgetItem(f"{first_line}\n{when} · {', '.join(info.drafters[1:]) or 'plain'}{mark}")
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setToolTip(info.prompt)
            self.history.addItem(item)
            if info.id == select:
                self.history.setCurrentItem(item)

    def _on_history_item(self, item: QListWidgetItem) -> None:
        if not self.running():
            self.open_comparison(item.data(Qt.ItemDataRole.UserRole))

    def open_comparison(self, comparison_id: int) -> None:
        """Show a saved comparison as it ended; Replay plays it again from its recorded times."""
        try:
            info = self.session.store.comparison(comparison_id)
        except SpecchatError as error:
            self._say(str(error))
            self.refresh_history()
            return
        self._stop_replay()
        self.comparison_id = comparison_id
        self.greedy = info.greedy
        self.prompt.setPlainText(info.prompt)
        self._set_lanes([Track.from_row(track) for track in info.tracks])
        self.show_results()

    def _history_menu(self, point) -> None:
        item = self.history.itemAt(point)
        if item is None:
            return
        comparison_id = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction("Open", lambda: self.open_comparison(comparison_id))
        menu.addAction("Delete…", lambda: self.delete_comparison(comparison_id))
        menu.exec(self.history.mapToGlobal(point))

    def delete_comparison(self, comparison_id: int, confirm: bool = True) -> None:
        if confirm and QMessageBox.question(self, "Delete comparison", "Delete this comparison and its "
                                            "measurements?") != QMessageBox.StandardButton.Yes:
            return
        self.session.store.delete_comparison(comparison_id)
        self.session.stats_changed.emit()
        if self.comparison_id == comparison_id:
            self.comparison_id = None
            self._set_lanes([])
        self.refresh_history()

    # -- state ----------------------------------------------------------------------------------------------------

    def _update_buttons(self) -> None:
        running = self.running()
        self.race_button.setVisible(not running)
        self.stop_button.setVisible(running)
        self.race_button.setEnabled(self.session.ready)
        for box in self.drafter_boxes.values():
            box.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, running)
        self.history.setEnabled(not running)
        if running:
            self._set_replay_enabled(False)

    def _say(self, message: str) -> None:
        self.verdict.setText(f"<span style='color:#b3261e'>{html.escape(message)}</span>")

    def closeEvent(self, event) -> None:
        self.stop()
        if self._job is not None:  # its report then arrives before anything else can start here
            self._job.wait(CLOSE_WAIT_MS)
            self._job = None
            self.session.release_device("race")
        self._replay_timer.stop()
        super().closeEvent(event)


def _bold() -> QFont:
    font = QFont()
    font.setBold(True)
    return font
