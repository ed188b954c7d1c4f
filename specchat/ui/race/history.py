"""The saved comparisons: the list beside the race (newest first, ✓/✗ for identical outputs), reopening one,
deleting one with its measurements, and saving a finished race as a comparison with one run per lane."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QMenu, QMessageBox

from ...chats.context_plan import question_title
from ...core.errors import SpecchatError
from ...engine.decoding.speculative import GenerationConfig
from ...engine.race import Track, all_identical, lane_results
from ...storage.records import RunRecord, track_row

TOOLTIP_CHARS = 600


class ComparisonHistory(QListWidget):
    """The store's comparisons as a list; asks the window to open one and tells it when one is deleted.

    Problems (a comparison deleted elsewhere, a save the database refuses) go to `report`, the window's message line.
    """

    open_requested = Signal(int)  # clicked, activated or "Open" in the context menu
    deleted = Signal(int)  # removed from the store, before the list is refreshed

    def __init__(self, session, report: Callable[[str], None], parent=None):
        super().__init__(parent)
        self.session = session
        self._report = report
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setStyleSheet("QListWidget::item { padding: 4px 2px; }")
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._menu)
        self.itemActivated.connect(self._on_item)
        self.itemClicked.connect(self._on_item)

    def refresh(self, select: int | None = None) -> None:
        self.clear()
        for info in self.session.comparisons.find():
            when = info.created_at.astimezone().strftime("%d %b %H:%M")
            first_line = question_title(info.prompt)[:40]
            mark = "" if info.identical is None else (" ✓" if info.identical else " ✗")
            item = QListWidgetItem(f"{first_line}\n{when} · {', '.join(info.drafters[1:]) or 'plain'}{mark}")
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            # a document raced with its question can run to megabytes: the tooltip shows its start
            item.setToolTip(info.prompt if len(info.prompt) <= TOOLTIP_CHARS else info.prompt[:TOOLTIP_CHARS] + "…")
            self.addItem(item)
            if info.id == select:
                self.setCurrentItem(item)

    def _on_item(self, item: QListWidgetItem) -> None:
        self.open_requested.emit(item.data(Qt.ItemDataRole.UserRole))

    def load(self, comparison_id: int):
        """The saved comparison (storage record), or None, reported, when it is gone."""
        try:
            return self.session.comparisons.get(comparison_id)
        except SpecchatError as error:
            self._report(str(error))
            self.refresh()
            return None

    def _menu(self, point) -> None:
        item = self.itemAt(point)
        if item is None:
            return
        comparison_id = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction("Open", lambda: self.open_requested.emit(comparison_id))
        menu.addAction("Delete…", lambda: self.delete(comparison_id))
        menu.exec(self.mapToGlobal(point))

    def delete(self, comparison_id: int, confirm: bool = True) -> None:
        if confirm and QMessageBox.question(self.window(), "Delete comparison", "Delete this comparison and its "
                                            "measurements?") != QMessageBox.StandardButton.Yes:
            return
        self.session.comparisons.delete(comparison_id)
        self.session.stats_changed.emit()
        self.deleted.emit(comparison_id)
        self.refresh()

    def save(self, tracks: list[Track], greedy: bool, prompt: str, race_settings: dict,
             config: GenerationConfig) -> int | None:
        """Store a finished race: the comparison, its tracks and one run per lane; None, reported, if refused.

        `race_settings` are the comparison's recorded settings, `config` the lanes' generation config (its seed
        set) as the race started."""
        pair = self.session.pair
        results = lane_results(tracks, greedy)
        runs = [self._run_values(track, result, tracks[0], config) for track, result in zip(tracks, results)]
        try:
            return self.session.comparisons.save(
                {"prompt": prompt, "target": pair.target.name,
                 "draft": pair.draft_label, "settings": race_settings,
                 "greedy": greedy, "identical": all_identical(tracks) if greedy else None,
                 "app_session_id": self.session.app_session_id},
                [track_row(track) for track in tracks], runs)
        except SpecchatError as error:
            self._report(f"The comparison could not be saved: {error}")
            return None
        finally:
            self.session.stats_changed.emit()

    def _run_values(self, track: Track, result, plain: Track, config: GenerationConfig) -> RunRecord:
        """A lane's run: its figures, what it ran with (a remote lane under the remote model), and its speedup
        over the plain lane."""
        context = self.session.run_context(track.drafter, config)
        return self.session.runs.record(
            track.stats, context, speedup=result.speedup, speedup_basis="measured" if result.speedup else None,
            baseline_tokens_per_s=plain.tokens_per_s, finish_reason=track.finish_reason)
