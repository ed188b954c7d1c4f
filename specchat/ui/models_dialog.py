"""Settings → Models…: the model catalog and the models on this computer, with search, licence, sizes, whether
each fits in this machine's memory, predicted speedups, one-click downloads with progress and Cancel, and choosing
a target with a compatible draft. Downloading is the only thing in specchat that uses the network, and the dialog
says so (the rows: model_rows.py; the downloads: downloads.py)."""

from __future__ import annotations

from urllib.parse import urlparse

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout)

from ..core.formatting import format_size
from ..engine.loading.machine import machine_here
from ..models.catalog import entries as cat
from ..models.catalog.fit import memory_rule_text
from ..models.hub.snapshots import downloaded_models, hub_endpoint
from .downloads import DownloadsLink, DownloadState
from .model_rows import (ALPHA, NO_DRAFT, ModelRow, catalog_rows, draft_choices, local_rows, matches, row_is_local,
                         row_kept_bytes)
from .offline_pair_panel import OfflinePairPanel

COLUMNS = ("Model", "Family", "Role", "Licence", "Parameters", "Download", "Memory here", "Fits here",
           f"Speedup α={ALPHA:g}", "State")
STATE_COLUMN = COLUMNS.index("State")
VERDICT_COLOURS = {"fits": "#2e8b57", "tight": "#b8860b", "too big": "#c0392b"}


class ModelsDialog(QDialog):
    """Lists the models; `chosen(target spec, draft spec, drafter)` when the user picks a target ("" draft: none;
    the drafter that uses it: "model", or "pld" without one)."""

    chosen = Signal(str, str, str)

    def __init__(self, link: DownloadsLink, request_download, precision: str = "auto", device: str = "auto",
                 current: str = "embedded", parent=None):
        """link: where the session's downloads arrive; request_download(hub_id): asks the session for them (an
        empty id only attaches them to the link); current: the target Settings holds now (selected first)."""
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(1180, 660)
        self.link, self._request = link, request_download
        self.precision = precision
        self.catalog = cat.load_catalog()
        try:
            self.costs = cat.load_costs()
        except cat.CatalogError:
            self.costs = None  # a stripped installation: everything but the predictions still stands
        self.machine = machine_here(device)
        self.rows: list[ModelRow] = []
        self._local: dict[str, bool] = {}
        self._focus: str | None = None  # the download the progress bar shows
        self._listening = False
        self._build()
        self.link.attached.connect(self._on_attached)
        if self.link.downloads is None:
            self._request("")  # the session attaches its downloads to the link, if the window routes requests
        self._on_attached()
        self.refresh()
        self._fit_to_columns()
        self.select(current)

    # -- layout -------------------------------------------------------------------------------------------------------

    def columns_width(self) -> int:
        """The dialog's width at which every column shows whole, each sized to its contents ("ships with
        specchat", a speedup with its K and draft), with the table's scroll bar, frame and the layout's margins."""
        header = self.table.horizontalHeader()
        header.resizeSections(QHeaderView.ResizeMode.ResizeToContents)
        columns = sum(header.sectionSize(column) for column in range(header.count()))
        margins = self.layout().contentsMargins()
        return (columns + self.table.verticalScrollBar().sizeHint().width() + 2 * self.table.frameWidth()
                + margins.left() + margins.right())

    def _fit_to_columns(self) -> None:
        """Opens the dialog wide enough for every column (columns_width), within the screen it opens on: a narrow
        screen keeps the table's scroll bar rather than a dialog wider than the screen."""
        width = max(self.width(), self.columns_width())
        if self.screen() is not None:
            width = min(width, self.screen().availableGeometry().width() - 40)
        self.resize(width, self.height())

    def _build(self) -> None:
        """The dialog's widgets, top to bottom: the network note, the search, this computer's memory, the table,
        the selected model's details and draft, the download's progress, the offline pair, the buttons."""
        host = urlparse(hub_endpoint()).netloc or hub_endpoint()
        self.network_note = QLabel(f"Downloading uses the network ({host}); nothing else in specchat does.")
        self.network_note.setObjectName("networkNote")
        self.network_note.setStyleSheet("#networkNote { background: #eef4fb; border: 1px solid #c6dbf2; "
                                        "border-radius: 6px; padding: 6px; color: #1d3f66; }")
        self.search = QLineEdit(placeholderText="Search by name, family, licence…", clearButtonEnabled=True)
        self.search.textChanged.connect(self._apply_search)
        here = QLabel(f"This computer: {self.machine.describe()}. Memory is what the model needs at the format it "
                      f"would run in (Precision: {self.precision}): {memory_rule_text()}.")
        here.setWordWrap(True)
        here.setEnabled(False)
        self._build_table()
        self.details = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse,
                              textFormat=Qt.TextFormat.PlainText)
        self.draft = QComboBox()
        self.draft.currentIndexChanged.connect(self._show_compatibility)
        self.compat = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        draft_row = QHBoxLayout()
        draft_row.addWidget(QLabel("Draft:"))
        draft_row.addWidget(self.draft, 1)
        progress_row, buttons = self._build_buttons()
        layout = QVBoxLayout(self)
        layout.addWidget(self.network_note)
        layout.addWidget(self.search)
        layout.addWidget(here)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addLayout(draft_row)
        layout.addWidget(self.compat)
        layout.addLayout(progress_row)
        layout.addWidget(self.progress_label)
        self.offline_pair = OfflinePairPanel(lambda: getattr(self.link.downloads, "thread", None))
        self.offline_pair.installed.connect(self.refresh)
        self.offline_pair.use_requested.connect(self._use_offline_pair)
        layout.addWidget(self.offline_pair)
        layout.addLayout(buttons)

    def _build_table(self) -> None:
        """The table of models (self.table): one row selected at a time, read-only, a double click uses it."""
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._on_selected)
        self.table.itemDoubleClicked.connect(lambda _item: self.use_selected())

    def _build_buttons(self) -> tuple[QHBoxLayout, QHBoxLayout]:
        """The progress bar with Cancel, and the buttons: another Hub id to download, Download, Use as target and
        Close; returns (the progress row, the buttons' row)."""
        self.progress = QProgressBar(textVisible=False)
        self.progress_label = QLabel(wordWrap=True, textFormat=Qt.TextFormat.PlainText)  # the Hub's errors
        self.other_id = QLineEdit(placeholderText="Another Hub model: org/name")
        self.other_id.returnPressed.connect(self._download_other)
        other_download = QPushButton("Download")
        other_download.clicked.connect(self._download_other)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self.download_selected)
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.setToolTip("Stops the download; what arrived stays on disk, and the next download of "
                                      "this model continues from there.")
        self.cancel_button.clicked.connect(self.cancel_download)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.cancel_button)
        self._ticker = QTimer(self, interval=1000)  # the speed and time left move while bytes do not (a stall)
        self._ticker.timeout.connect(self._show_progress)
        self.use_button = QPushButton("Use as target")
        self.use_button.clicked.connect(self.use_selected)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        for button in (other_download, self.download_button, self.cancel_button, self.use_button, close):
            button.setAutoDefault(False)  # Enter in the search or Hub id field must not choose or close
        buttons = QHBoxLayout()
        buttons.addWidget(self.other_id, 1)
        buttons.addWidget(other_download)
        buttons.addStretch(1)
        for button in (self.download_button, self.use_button, close):
            buttons.addWidget(button)
        return progress_row, buttons

    # -- rows ----------------------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Rebuilds the rows: what is downloaded changes as downloads end."""
        selected = self.selected_row()
        downloaded = self._downloaded_hub_models()
        self.rows = catalog_rows(self.catalog, self.costs, self.machine, self.precision) + \
            local_rows(self.catalog, downloaded)
        complete = {hub_id.lower() for hub_id in downloaded}
        self._local = {row.spec: row_is_local(row, complete) for row in self.rows}
        self.table.setRowCount(len(self.rows))
        for index, row in enumerate(self.rows):
            cells = (row.name, row.family, row.role, row.licence, row.parameters, row.download, row.memory,
                     row.verdict, row.speedup, self.state_text(row))
            tips = (row.spec, "", "", row.licence_text(), "", "", row.fit_text(), row.fit_text(), row.speedup_basis,
                    "")
            for column, (text, tip) in enumerate(zip(cells, tips)):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                if column == COLUMNS.index("Fits here") and row.verdict in VERDICT_COLOURS:
                    item.setForeground(Qt.GlobalColor.white)
                    item.setBackground(QColor(VERDICT_COLOURS[row.verdict]))
                self.table.setItem(index, column, item)
        self._apply_search()
        if selected is not None:
            self.select(selected.spec)
        self._on_selected()  # the same row stays selected (no signal), but its state and buttons have changed

    def _downloaded_hub_models(self) -> dict[str, str]:
        """{hub id: snapshot folder} of the Hub models complete on this computer (the cache only, no network)."""
        return {hub_id: str(folder) for hub_id, folder in downloaded_models().items()}

    def state_text(self, row: ModelRow) -> str:
        state = self._state(row)
        if state is not None and state.active:
            if state.status == "waiting":
                return "waiting to download"
            return "checking" if state.status == "checking" else f"downloading {int(100 * (state.fraction or 0))}%"
        if row.ships:
            return "ships with specchat"
        if self._local.get(row.spec):
            return "on this computer"
        kept = row_kept_bytes(row)
        return f"partly downloaded ({format_size(kept)} kept)" if kept else "not downloaded"

    def _state(self, row: ModelRow | None) -> DownloadState | None:
        downloads = self.link.downloads
        if row is None or row.hub_id is None or downloads is None:
            return None
        return downloads.state(row.hub_id)

    def _apply_search(self) -> None:
        text = self.search.text()
        hits = {entry.id for entry in self.catalog.search(text)} if text.strip() else set()
        for index, row in enumerate(self.rows):
            self.table.setRowHidden(index, not matches(row, hits, text))

    def visible_rows(self) -> list[ModelRow]:
        return [row for index, row in enumerate(self.rows) if not self.table.isRowHidden(index)]

    def selected_row(self) -> ModelRow | None:
        indexes = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.rows[indexes[0].row()] if indexes and indexes[0].row() < len(self.rows) else None

    def select(self, spec: str) -> bool:
        for index, row in enumerate(self.rows):
            if spec.lower() in (row.spec.lower(), (row.hub_id or "").lower(),
                                (row.entry.id.lower() if row.entry is not None else "")):
                self.table.selectRow(index)
                return True
        return False

    # -- the selected model ------------------------------------------------------------------------------------------

    def _on_selected(self) -> None:
        row = self.selected_row()
        if row is not None and self._state(row) is not None:
            self._focus = row.hub_id
        self._show_details(row)
        self._fill_drafts(row)
        self._update_buttons()
        self._show_progress()

    def _show_details(self, row: ModelRow | None) -> None:
        if row is None:
            self.details.setText("Choose a model to see its details, its drafts and to download it.")
            return
        note = f" ({row.entry.note})" if row.entry is not None and row.entry.note else ""
        lines = [f"{row.name} — {row.entry.id if row.entry is not None else row.spec}{note}",
                 f"Licence: {row.licence_text()}.", f"Memory here: {row.fit_text()}."]
        if row.quant:  # on a CPU with llama.cpp: one GGUF file, not the safetensors checkpoint
            lines.append(f"Download: {row.hub_id}, {row.quant} for llama.cpp (the safetensors checkpoint, for a GPU "
                         f"or training a drafter: type {row.entry.id} below).")
        if row.speedup != "—":
            lines.append(f"Predicted speedup at acceptance {ALPHA:g}: {row.speedup} ({row.speedup_basis}).")
        self.details.setText("\n".join(lines))

    def _fill_drafts(self, row: ModelRow | None) -> None:
        self.draft.blockSignals(True)
        self.draft.clear()
        if row is not None and row.is_target:
            choices = draft_choices(self.catalog, row.entry, self._is_local, self.machine) if row.entry is not None \
                else [NO_DRAFT]
            for choice in choices:
                self.draft.addItem(choice.label, choice)
        self.draft.setCurrentIndex(0)
        self.draft.setEnabled(row is not None and row.is_target)
        self.draft.blockSignals(False)
        self._show_compatibility()

    def _is_local(self, spec: str) -> bool:
        return self._local.get(spec, False)

    def _show_compatibility(self) -> None:
        row, choice = self.selected_row(), self.draft.currentData()
        if row is None or not row.is_target or choice is None:
            self.compat.setText("A draft model only: it drafts for the targets listed with it." if row else "")
            self.compat.setStyleSheet("")
        else:
            explanation = choice.explanation
            if row.entry is None:
                explanation = ("This model is not in the catalog: choose a draft in Settings, which checks it "
                               "against this model's tokenizer.")
            missing = "" if not choice.spec or self._is_local(choice.spec) else \
                " The draft is not downloaded yet: download it too."
            self.compat.setText(("✔ " if choice.compatible else "✖ ") + explanation[:1].upper() + explanation[1:]
                                + missing)
            colour = "#c0392b" if not choice.compatible else "#b8860b" if choice.through_text else "#2e8b57"
            self.compat.setStyleSheet(f"color: {colour};")
        self._update_buttons()

    def _update_buttons(self) -> None:
        row, downloads = self.selected_row(), self.link.downloads
        state = self._state(row)
        busy = state is not None and state.active
        self.download_button.setEnabled(row is not None and downloads is not None and not row.ships
                                        and not self._local.get(row.spec) and not busy)
        self.download_button.setToolTip("" if downloads is not None else "Downloads are not available here.")
        focused = downloads.state(self._focus) if downloads is not None and self._focus else None
        self.cancel_button.setVisible(focused is not None and focused.active)
        choice = self.draft.currentData()
        self.use_button.setEnabled(row is not None and row.is_target and (choice is None or choice.compatible))
        self.use_button.setToolTip("" if row is None or row.is_target else "A draft model only: choose a target.")

    def _use_offline_pair(self, target: str, draft: str, drafter: str) -> None:
        self.chosen.emit(target, draft, drafter)
        self.accept()

    def use_selected(self) -> None:
        row = self.selected_row()
        if row is None or not self.use_button.isEnabled():
            return
        choice = self.draft.currentData() or NO_DRAFT
        self.chosen.emit(row.spec, choice.spec, choice.drafter)
        self.accept()

    # -- downloads -----------------------------------------------------------------------------------------------------

    def _on_attached(self) -> None:
        downloads = self.link.downloads
        if downloads is not None and not self._listening:
            self._listening = True
            downloads.changed.connect(self._on_download_changed)
            downloads.ended.connect(self._on_download_ended)  # a method: disconnected when the dialog is deleted
            if self.isVisible():
                downloads.watchers += 1
        self.offline_pair.update_state()
        self._update_buttons()

    def _on_download_ended(self, _repo_id: str) -> None:
        self.refresh()

    def download_selected(self) -> None:
        row = self.selected_row()
        if row is not None and row.hub_id is not None:
            self._start(row.hub_id)

    def _download_other(self) -> None:
        hub_id = self.other_id.text().strip()
        if hub_id:
            self._start(hub_id)
            self.select(hub_id)

    def _start(self, hub_id: str) -> None:
        self._focus = hub_id
        self._request(hub_id)
        self._show_progress()
        self._update_buttons()

    def cancel_download(self) -> None:
        """Cancels the download the progress bar shows."""
        if self.link.downloads is not None and self._focus is not None:
            self.link.downloads.cancel(self._focus)

    def _on_download_changed(self, repo_id: str) -> None:
        for index, row in enumerate(self.rows):
            if (row.hub_id or "") == repo_id:
                self.table.item(index, STATE_COLUMN).setText(self.state_text(row))
        if self._focus is None:
            self._focus = repo_id
        if repo_id == self._focus:
            self._show_progress()
        self._update_buttons()

    def _show_progress(self) -> None:
        downloads = self.link.downloads
        state = downloads.state(self._focus) if downloads is not None and self._focus else None
        active = state is not None and state.active
        self.progress.setVisible(active)
        self.cancel_button.setVisible(active)
        self.progress_label.setVisible(state is not None)
        if active and not self._ticker.isActive():
            self._ticker.start()
        elif not active:
            self._ticker.stop()
        if state is None:
            return
        host = urlparse(hub_endpoint()).netloc or "the Hub"
        text = state.describe(host)
        self.progress_label.setText(text if state.repo_id in text else f"{state.repo_id}: {text}")
        failed = state.status == "failed"
        self.progress_label.setStyleSheet("color: #c0392b;" if failed else "")
        if state.fraction is None:
            self.progress.setRange(0, 0)  # busy until the sizes are known
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * state.fraction))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self.link.downloads is not None:
            self.link.downloads.watchers += 1

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().hideEvent(event)
        if self.link.downloads is not None:
            self.link.downloads.watchers = max(self.link.downloads.watchers - 1, 0)

