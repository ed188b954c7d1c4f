"""The window's chat files: export (Markdown, JSON) and import (JSON), the import off the GUI thread.

An import reads, checks and stores a file of up to 50 MB (about two million messages): seconds of work that once
froze the window (issue 37). It runs on the session's background thread as a ReportingWorker; the store reports
how far it is (storage.exchange.ImportProgress), the status bar shows it, and only plain data crosses back: the
progress records, the new chat's id or the error's message. The store opens its own short session for the import,
on that thread, as for every unit of work.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

from ..core.errors import SpecchatError
from .workers import ReportingWorker

PHASES = {"checking": "checking", "preparing": "preparing", "writing": "saving"}  # ImportProgress.phase, as said


class ChatFiles(QObject):
    """Export and Import for a MainWindow: the window's menu actions call export() and import_chat()."""

    import_ended = Signal()  # an import's outcome (the chat opened, or the banner saying why not) is on screen

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.importing: ReportingWorker | None = None  # the import under way, if any
        self.path = ""  # the file it reads

    def export(self, kind: str) -> None:
        """Asks where, then writes the open chat as Markdown ("md") or JSON; failures go to the banner."""
        window = self.window
        if window.conversation_id is None:
            return
        path, _ = QFileDialog.getSaveFileName(window, "Export chat", f"chat.{kind}")
        if path:
            try:
                warning = window.session.export(window.conversation_id, path, kind)
            except (SpecchatError, OSError) as error:
                window.banner.show_message(f"Could not export to {path}: {error}")
                return
            if warning:
                window.banner.show_note(f"Exported to {path}. {warning}")
            else:
                window.statusBar().showMessage(f"Exported to {path}.", 4000)

    def import_chat(self) -> None:
        """Asks for a file and imports it on the background thread; one import at a time. The chat opens when it
        is in (unless a reply is streaming then: it waits in the list), and a bad file is said in the banner."""
        window = self.window
        if self.importing is not None:
            window.statusBar().showMessage("An import is under way: wait for it to end.", 4000)
            return
        path, _ = QFileDialog.getOpenFileName(window, "Import chat", filter="JSON (*.json)")
        if not path:
            return
        session = window.session
        job = ReportingWorker(lambda report: session.import_file(path, report))
        # Bound methods: a report that arrives after the window is gone is dropped with it.
        job.yielded.connect(self._on_progress)
        job.returned.connect(self._on_imported)
        job.errored.connect(self._on_failed)
        self.importing, self.path = job, path
        window.statusBar().showMessage(f"Importing {Path(path).name}: reading the file…")
        session.background.submit(job)

    def _on_progress(self, progress) -> None:
        """Says in the status bar how far the import is (progress: the store's storage.exchange.ImportProgress; the
        window's modules do not import storage)."""
        if self.importing is not None:
            self.window.statusBar().showMessage(
                f"Importing {Path(self.path).name}: {PHASES.get(progress.phase, progress.phase)} "
                f"{progress.done:,} of {progress.total:,} messages…")

    def _on_imported(self, conversation_id: int) -> None:
        """The chat is stored: it shows in the list, and opens unless a reply is streaming."""
        window = self.window
        self.importing = None
        window.statusBar().showMessage(f"Imported {Path(self.path).name}.", 4000)
        if window.active is None:  # a reply streaming now belongs to the open chat: the import waits in the list
            window.conversation_id = conversation_id
        window.refresh_conversations()
        if window.active is None:
            window.open_conversation(conversation_id)
        self.import_ended.emit()

    def _on_failed(self, message: str) -> None:
        """Nothing was written: the banner says why (the store's messages quote bad values only in part)."""
        self.importing = None
        self.window.statusBar().clearMessage()
        self.window.banner.show_message(f"Could not import {self.path}: {message}")
        self.import_ended.emit()
