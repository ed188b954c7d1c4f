"""The race's replay: every lane played from its recorded per-token times on one shared clock, so the speedup is
seen as well as read. Replay owns the controls (play/pause, speed, scrubber, clock) and the timer; the window
hands it the lanes and tracks to draw and says when it may play (not while a race runs)."""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSlider

from ...engine.race import Track

REPLAY_FRAME_MS = 30
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)


class Replay(QObject):
    """Plays the lanes' tracks from 0 to the longest lane's wall time, at a chosen speed; draws the lanes' text
    and the chart's cursor at the clock, and lets the scrubber seek."""

    finished = Signal()  # the clock reached the end

    def __init__(self, chart, busy: Callable[[], bool], parent=None):
        super().__init__(parent)
        self.chart = chart  # a lanes.TokensChart: its cursor follows the clock
        self._busy = busy  # true while a race runs: nothing to replay then
        self.lanes: list = []  # lanes.Lane, one per track
        self.tracks: list[Track] = []
        self.clock = 0.0
        self._started: float | None = None
        self._from = 0.0
        self.play_button = QPushButton("▶ Replay")
        self.play_button.clicked.connect(self.toggle)
        self.speed = QComboBox()
        for speed in SPEEDS:
            self.speed.addItem(f"{speed:g}×", speed)
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.speed.setToolTip("Replay speed (1× = real time as measured)")
        self.speed.currentIndexChanged.connect(self._on_speed_changed)
        self.slider = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=1000)
        self.slider.sliderMoved.connect(lambda value: self.seek(value / 1000 * self.duration()))
        self.clock_label = QLabel("0.00 s / 0.00 s")
        self.row = QHBoxLayout()
        self.row.addWidget(self.play_button)
        self.row.addWidget(QLabel("Speed:"))
        self.row.addWidget(self.speed)
        self.row.addWidget(self.slider, 1)
        self.row.addWidget(self.clock_label)
        self.set_enabled(False)
        self._timer = QTimer(self, interval=REPLAY_FRAME_MS)
        self._timer.timeout.connect(self._frame)

    def load(self, lanes: list, tracks: list[Track]) -> None:
        """New lanes to play (disabled until show_end says the tracks are complete)."""
        self.lanes, self.tracks = lanes, tracks
        self.set_enabled(False)

    def show_end(self) -> None:
        """The tracks are complete: the clock stands at their end, ready to play again from the start."""
        self.set_enabled(True)
        self.clock = self.duration()
        self._show_clock()

    def duration(self) -> float:
        return max((t.wall_s for t in self.tracks), default=0.0)

    def toggle(self) -> None:
        if self._timer.isActive():
            self.pause()
        else:
            self.play()

    def play(self) -> None:
        if not self.tracks or self._busy():
            return
        if self.clock >= self.duration():
            self.clock = 0.0
        self._from = self.clock
        self._started = time.perf_counter()
        self.play_button.setText("❚❚ Pause")
        self._timer.start()
        self._draw()

    def pause(self) -> None:
        self._timer.stop()
        self.play_button.setText("▶ Replay")

    def stop(self) -> None:
        self.pause()
        self.clock = 0.0

    def halt(self) -> None:
        """Stop the timer only (the window is closing)."""
        self._timer.stop()

    def _on_speed_changed(self) -> None:
        if self._timer.isActive():  # keep the clock where it is, change only its rate from now on
            self._from, self._started = self.clock, time.perf_counter()

    def seek(self, t: float) -> None:
        self.clock = min(max(t, 0.0), self.duration())
        if self._timer.isActive():
            self._from, self._started = self.clock, time.perf_counter()
        self._draw()

    def _frame(self) -> None:
        speed = self.speed.currentData()
        self.clock = self._from + (time.perf_counter() - self._started) * speed
        if self.clock >= self.duration():
            self.clock = self.duration()
            self._draw()
            self.pause()
            self.finished.emit()
            return
        self._draw()

    def _draw(self) -> None:
        t = self.clock
        for lane, track in zip(self.lanes, self.tracks):
            shown = track.tokens_at(t)
            lane.view.show_tokens(track, shown)
            state = "done" if shown == len(track.token_ids) and t >= track.wall_s else "●"
            lane.status.setText(f"{state} {shown} tokens at {min(t, track.wall_s):.2f} s")
        self.chart.set_cursor(t)
        self._show_clock()

    def _show_clock(self) -> None:
        duration = self.duration()
        self.clock_label.setText(f"{self.clock:.2f} s / {duration:.2f} s")
        self.slider.blockSignals(True)
        self.slider.setValue(int(1000 * self.clock / duration) if duration else 0)
        self.slider.blockSignals(False)

    def set_enabled(self, enabled: bool) -> None:
        for widget in (self.play_button, self.speed, self.slider):
            widget.setEnabled(enabled)
