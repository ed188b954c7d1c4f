"""The race: one prompt decoded plainly and by each chosen drafter, lane by lane, then replayed side by side.

Lanes run one after the other on the same device (never at once: they would slow each other down) and stream live.
When all are done, the replay plays every lane from its recorded per-token times on one shared clock, so the
speedup is seen as well as read; the chart shows tokens over time and the table the measured figures.

RaceWindow builds the window and runs races; the lanes and chart (lanes.py), the table and verdict (table.py), the
replay (replay.py) and the saved comparisons (history.py) are its parts.
"""

from __future__ import annotations

import dataclasses
import html
import random
import threading

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QSpinBox, QSplitter,
                               QVBoxLayout, QWidget)

from ...core.errors import SpecchatError
from ...core.run_kind import REMOTE, RunKind
from ...core.vocabulary import CANCELLED, DRAFTERS, PLAIN, drafter_kind
from ...engine.chat_prompt import Message
from ...engine.decoding.events import GenerationResult, StepEvent
from ...engine.race import MAX_RUNS, REPEAT_S, RaceRunner, Rerun, Track, all_identical, lane_results, lanes_for
from ..plain import plain_label, plain_tip
from ..reply_workers import RaceWorker
from ..theme import current_theme
from .history import ComparisonHistory
from .lanes import LANE_COLOURS, Lane, TokensChart
from .replay import Replay
from .table import DiffDialog, ResultsTable, verdict_html

DEFAULT_RACE_TOKENS = 128
CLOSE_WAIT_MS = 10_000  # a stopped race ends after the lane's current step


REMOTE_TIP = ("{}. A lane on another machine: its text is compared with plain decoding's here (the same model gives "
              "the same greedy text), its speed is not")

class RaceWindow(QWidget):
    """Side-by-side comparison of plain decoding and the drafters, with history, replay, chart and figures."""

    race_finished = Signal()  # all lanes done and the comparison saved (or the race failed / was stopped)
    replay_finished = Signal()
    repeat_s, max_runs = REPEAT_S, MAX_RUNS  # how long and how often a short race runs its lanes again (RaceRunner)

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
        self._build()
        session.status_changed.connect(self._refresh_drafter_boxes)
        self._refresh_drafter_boxes()
        self.history.refresh()
        self.resize(1200, 820)

    # -- layout ---------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        drafters_row = self._build_controls()
        self.lane_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.lane_splitter.setChildrenCollapsible(False)

        self.chart = TokensChart()
        self.chart.setMinimumSize(260, 200)
        self.replay = Replay(self.chart, self.running, self)
        self.replay.finished.connect(self.replay_finished)
        self.speed, self.clock_label = self.replay.speed, self.replay.clock_label
        self.results = ResultsTable()
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

        self.history = ComparisonHistory(self.session, self._say)
        self.history.open_requested.connect(self._on_history_open)
        self.history.deleted.connect(self._on_comparison_deleted)
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
        layout.addLayout(self.replay.row)

        outer = QSplitter(Qt.Orientation.Horizontal)
        outer.addWidget(history_box)
        outer.addWidget(main)
        outer.setSizes([190, 1010])
        outer.setStretchFactor(1, 1)
        root = QVBoxLayout(self)
        root.setContentsMargins(8, 8, 8, 8)
        root.addWidget(outer)
        close = QAction(self, shortcut=QKeySequence("Ctrl+W"), triggered=self.close)
        self.addAction(close)

    def _build_controls(self) -> QVBoxLayout:
        """The prompt, the drafters' check boxes (a row of their own: eight of them), the token limit, Race/Stop and
        the settings line."""
        self.prompt = QPlainTextEdit(placeholderText="A prompt to race, e.g. “Explain what a hash map is.”")
        self.prompt.setMaximumHeight(70)
        self.drafter_boxes: dict[str, QCheckBox] = {}
        drafters_row = QHBoxLayout()
        drafters_row.addWidget(QLabel("Plain decoding against:"))
        for info in DRAFTERS:
            if info.key == PLAIN:  # every race has its lane
                continue
            box = QCheckBox(info.box_label)  # short labels: they share one row
            box.setToolTip(info.label)
            self.drafter_boxes[info.key] = box
            drafters_row.addWidget(box)
        self.drafter_boxes[REMOTE] = remote = QCheckBox("Remote")  # when the chat uses a remote engine (API menu)
        drafters_row.addWidget(remote)
        drafters_row.addStretch(1)
        controls_row = QHBoxLayout()
        controls_row.addWidget(QLabel("Max tokens:"))
        self.max_tokens = QSpinBox(minimum=8, maximum=4096, value=DEFAULT_RACE_TOKENS, singleStep=32)
        controls_row.addWidget(self.max_tokens)
        controls_row.addStretch(1)
        self.race_button = QPushButton("▶  Race")
        self.race_button.setDefault(True)
        self.race_button.clicked.connect(self.start_race)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        controls_row.addWidget(self.race_button)
        controls_row.addWidget(self.stop_button)
        self.settings_label = plain_label(QLabel())  # model names, a remote one included
        self.settings_label.setStyleSheet(f"color: {current_theme().muted_text.name()}")
        self.settings_label.setWordWrap(True)
        rows = QVBoxLayout()
        rows.addLayout(drafters_row)
        rows.addLayout(controls_row)
        return rows

    # -- drafters -------------------------------------------------------------------------------------------------

    def _refresh_drafter_boxes(self) -> None:
        pair = self.session.pair
        has_draft = pair is not None and pair.has_draft  # loaded, or loaded by the lane's engine (load_draft)
        has_head = pair is not None and pair.has_head
        for drafter, box in self.drafter_boxes.items():
            info = drafter_kind(drafter)
            usable = (not info.needs_model or has_draft) and (not info.needs_head or has_head)
            if RunKind.parse(drafter).is_remote:
                usable = self.session.remote is not None
                box.setEnabled(usable)
                box.setToolTip(plain_tip(REMOTE_TIP.format(self.session.remote.info.describe())) if usable else
                               "Connect to a remote engine first: API → Chat with a remote engine…")
                if not usable:
                    box.setChecked(False)
                continue
            box.setEnabled(usable)
            box.setToolTip(info.label if usable else
                           "Needs a draft model: choose one in Settings" if info.needs_model else
                           "No draft head is trained for this target")
            if not usable:
                box.setChecked(False)
        if not any(box.isChecked() for box in self.drafter_boxes.values()):
            choice = self.session.settings.drafter
            box = self.drafter_boxes.get(choice) if not RunKind.parse(choice).is_plain else None
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
        models = (pair.target.name.split(" (")[0] + (f" + {pair.draft_label}" if pair.has_draft else "")
                  + (" + draft head" if pair.has_head else "")) if pair else "loading…"
        self.settings_label.setText(f"{models} · {sampling} · {k} · lanes run one after the other on "
                                    f"{pair.target.device if pair else 'the device'}, each after a warm-up; a "
                                    "short race runs them again, alternated, to show the spread")

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
            chat = [Message("user", text)]
            # PromptError, said here, for a prompt that cannot be one (each lane makes its own, as the CLI does)
            self.session.engines.fitter(whole_prompt=True).fit(chat, None, self.max_tokens.value())
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
        self._config = config  # as it was when the race started: what every lane's run is recorded with
        self.comparison_id = None
        self.history.clearSelection()
        self.replay.stop()
        self.chart.expected_tokens = config.max_new_tokens
        self._set_lanes([Track(d) for d in lanes_for(drafters)])
        self.lanes[0].status.setText("warming up every lane, then running…")
        self._cancel = threading.Event()
        self._job = worker = RaceWorker(runner, chat, drafters, config, self._cancel)
        worker.yielded.connect(self._on_step)
        worker.returned.connect(self._on_race_finished)
        worker.errored.connect(self._on_race_failed)
        self.session.claim_device("race")
        self._update_buttons()
        self.session.model_thread.submit(worker)

    def _race_runner(self) -> RaceRunner:
        """The lanes' engines: the loaded pair's, kept in its EngineCache (warm between races and shared with the
        chat), and the connected remote engine for the remote lane."""
        engines, remote, history = self.session.engines, self.session.remote, self.session.history

        def engine_for(drafter: str):
            kind = RunKind.parse(drafter)
            if kind.is_remote:
                return remote.engine
            # the history lane drafts from the chat's past replies (an empty index while the setting is off); the
            # prompt is read whole, as a one-message prompt always was (the engine refuses one too long)
            return engines.chat_engine(drafter, history if kind.needs_history else None, whole_prompt=True)

        return RaceRunner(engine_for, self.repeat_s, self.max_runs)

    def _on_step(self, lane_event: tuple[int, StepEvent | Rerun]) -> None:
        lane, event = lane_event
        if isinstance(event, Rerun):
            self._on_rerun(lane, event)
            return
        track = self.tracks[lane]
        track.add(event)
        self.lanes[lane].view.show_tokens(track, len(track.token_ids))
        stats = event.stats
        figures = f"{stats.new_tokens} tokens · {stats.tokens_per_s:.1f} tok/s"
        if not RunKind.parse(track.drafter).is_plain and stats.draft_proposed:
            figures += f" · α {stats.alpha:.2f} · τ {stats.tau:.2f}"
        self.lanes[lane].status.setText("● " + figures)
        for later in self.lanes[lane + 1:]:
            later.status.setText("waiting: lanes run one at a time")
        if event.result is not None:
            self._on_lane_finished(lane, event.result)

    def _on_lane_finished(self, lane: int, result: GenerationResult) -> None:
        track = self.tracks[lane]
        track.finish(result)
        self.lanes[lane].view.show_tokens(track, len(track.token_ids))
        self.lanes[lane].status.setText(f"{len(track.token_ids)} tokens in {track.wall_s:.2f} s · "
                                        f"{track.tokens_per_s:.1f} tok/s")
        if lane + 1 < len(self.lanes):
            self.lanes[lane + 1].status.setText("running…")
        self.chart.set_tracks([t for t in self.tracks if t.finish_reason is not None])  # the lines grow lane by lane

    def _on_rerun(self, lane: int, rerun: Rerun) -> None:
        """A finished lane running again, unseen, to measure the noise (engine.race.Rerun): its status says which
        run, and its speed is kept with its track (Track.add_run) for the table's median and range."""
        status = self.lanes[lane].status
        if rerun.tokens_per_s is None:
            status.setText(f"timing again, alternated: run {rerun.run} of {rerun.runs}…")
            return
        self.tracks[lane].add_run(rerun.tokens_per_s)
        status.setText(f"run {rerun.run} of {rerun.runs}: {rerun.tokens_per_s:.1f} tok/s")

    def _on_race_finished(self, _value=None) -> None:
        self._end_race()
        done = [t for t in self.tracks if t.finish_reason is not None]
        if len(done) < len(self.tracks) or any(t.finish_reason == CANCELLED for t in done):
            self._say("Race stopped: nothing was saved.")
            for lane, track in zip(self.lanes, self.tracks):
                if track.finish_reason is None:
                    lane.status.setText("not run")
            self.race_finished.emit()
            return
        self.comparison_id = self._save()
        self.show_results()
        self.history.refresh(select=self.comparison_id)
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
        return self.history.save(self.tracks, self.greedy, self._race_prompt, self._race_settings, self._config)

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
        self.replay.load(self.lanes, self.tracks)

    def show_results(self) -> None:
        """The table, the verdict and the chart of the current tracks; the lanes show the whole replies."""
        self.results.fill(lane_results(self.tracks, self.greedy))
        target = getattr(self.session.pair, "target", None)
        self.verdict.setText(verdict_html(self.tracks, self.greedy, getattr(target, "exactness", None)))
        self.chart.expected_tokens = 0
        self.chart.set_tracks(self.tracks)
        for lane, track in zip(self.lanes, self.tracks):
            lane.view.show_tokens(track, len(track.token_ids))
            runs = len(track.run_speeds)
            lane.status.setText(f"{len(track.token_ids)} tokens in {track.wall_s:.2f} s · "
                                f"{track.tokens_per_s:.1f} tok/s" + (f" (first of {runs} runs)" if runs > 1 else ""))
        self.replay.show_end()

    def identical(self) -> bool:
        return all_identical(self.tracks)

    def _show_diff(self, link: str) -> None:
        index = int(link.split(":")[1])
        DiffDialog(self.tracks[0], self.tracks[index], self).exec()

    # -- replay (replay.Replay plays the tracks; these keep the window's own surface) -----------------------------

    def duration(self) -> float:
        return self.replay.duration()

    def play(self) -> None:
        self.replay.play()

    def seek(self, t: float) -> None:
        self.replay.seek(t)

    # -- history --------------------------------------------------------------------------------------------------

    def _on_history_open(self, comparison_id: int) -> None:
        if not self.running():
            self.open_comparison(comparison_id)

    def open_comparison(self, comparison_id: int) -> None:
        """Show a saved comparison as it ended; Replay plays it again from its recorded times."""
        info = self.history.load(comparison_id)
        if info is None:
            return
        self.replay.stop()
        self.comparison_id = comparison_id
        self.greedy = info.greedy
        self.prompt.setPlainText(info.prompt)
        self._set_lanes([Track.from_row(track) for track in info.tracks])
        self.show_results()

    def delete_comparison(self, comparison_id: int, confirm: bool = True) -> None:
        self.history.delete(comparison_id, confirm)

    def _on_comparison_deleted(self, comparison_id: int) -> None:
        if self.comparison_id == comparison_id:
            self.comparison_id = None
            self._set_lanes([])

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
            self.replay.set_enabled(False)

    def _say(self, message: str) -> None:
        self.verdict.setText(f"<span style='color:#b3261e'>{html.escape(message)}</span>")

    def closeEvent(self, event) -> None:
        self.stop()
        if self._job is not None:  # its report then arrives before anything else can start here
            self._job.wait(CLOSE_WAIT_MS)
            self._job = None
            self.session.release_device("race")
        self.replay.halt()
        super().closeEvent(event)
