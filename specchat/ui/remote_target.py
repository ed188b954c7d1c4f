"""Chatting with a remote engine: a target on another machine behind an OpenAI-compatible endpoint (specchat serve,
vLLM, SGLang), chosen in the API menu, in place of the local models for chat replies.

The window's replies then stream from specchat.remote.RemoteEngine, a ChatEngine as the local pair's is, as the
same StepEvents as a local reply, so the transcript, the footer and the statistics work unchanged. What the labels
must say honestly: against specchat serve the draft highlighting is the server's own (exact); against other
engines, tokens that arrived together in one streamed step are highlighted as accepted *by inference* (dotted
underline), and α/τ come from the server's metrics (server-wide). The remote reply's speed is not compared with the
local plain-decoding calibration. The local models stay loaded for the race view and the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QMainWindow, QMenu,
                               QMessageBox, QVBoxLayout)

from ..chats.reply_controller import ReplyEngine
from ..chats.run_context import RunContext, RunModels
from ..core.run_kind import RunKind
from ..remote import RemoteEndpoint
from ..remote.engine import EndpointInfo, RemoteEngine, RemoteError, plain_http_key_warning
from ..remote.transport import without_credentials
from .plain import plain_label, plain_tip
from .workers import FunctionWorker, JobThread


@dataclass
class RemoteConnection:
    info: EndpointInfo
    engine: RemoteEngine  # a ChatEngine

    @property
    def models(self) -> RunModels:
        """What the remote engine's runs are recorded under: its model's name, on the remote device."""
        return RunModels.remote(self.info.name, self.info.kind)

    def reply_engine(self, settings) -> ReplyEngine:
        """What a chat reply runs on here (ChatSession.reply_engine): this engine, which reads the messages and
        applies its own template (nothing to fit), with the settings' generation config (settings: AppSettings).
        It is recorded under the remote model's name, with the drafter the server names ("remote" otherwise), and
        no K of ours: the server chooses its own (own_k False)."""
        engine = self.engine
        context = RunContext(settings.generation_config(), self.models, str(RunKind.remote(self.info.drafter)),
                             own_k=False)
        return ReplyEngine(context, lambda: engine)


class RemoteTargetSwitch(QObject):
    """API → "Chat with a remote engine…" and "Back to the local models", and the status bar's remote label."""

    connected = Signal(str)  # the status line, after a connection (tests wait for it)
    failed = Signal(str)

    def __init__(self, window: QMainWindow, session, menu: QMenu):
        super().__init__(window)
        self.window, self.session = window, session
        self._thread = JobThread("specchat-remote")  # network I/O: off the GUI and model threads
        menu.addSeparator()
        self.connect_action = QAction("Chat with a &remote engine…", window)
        self.connect_action.setToolTip("Use an OpenAI-compatible endpoint (specchat serve, vLLM, SGLang) as the "
                                       "target of the chat")
        self.connect_action.triggered.connect(self.ask)
        menu.addAction(self.connect_action)
        self.local_action = QAction("Back to the &local models", window, enabled=False)
        self.local_action.triggered.connect(self.disconnect)
        menu.addAction(self.local_action)
        self.label = plain_label(QLabel())  # the server's model id: never rendered as markup
        self.label.hide()
        window.statusBar().addPermanentWidget(self.label)
        window.reply_finished.connect(self._show_reply_figures)

    @property
    def connection(self) -> RemoteConnection | None:
        """Kept on the session, where the race view finds it too."""
        return self.session.remote

    def ask(self) -> None:
        dialog = RemoteDialog(self.window)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        url, key = dialog.url.text().strip(), dialog.key.text().strip() or None
        if key_warning(url, key) and not self._confirm_plain_http(key_warning(url, key)):
            return
        self.connect_to(url, key, dialog.model.text().strip() or None)

    def _confirm_plain_http(self, warning: str) -> bool:
        """Asks before a key goes unencrypted to another machine; True to send it anyway."""
        answer = QMessageBox.warning(self.window, "Send the key unencrypted?", warning[:1].upper() + warning[1:] + ".",
                                     QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                     QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Yes

    def connect_to(self, url: str, api_key: str | None = None, model: str | None = None) -> None:
        """Connects in the background; the status bar says how it went."""
        def connect() -> RemoteConnection:
            endpoint = RemoteEndpoint(url, api_key=api_key, model=model)
            info = endpoint.connect()
            return RemoteConnection(info, endpoint.engine(info))

        worker = FunctionWorker(connect)
        worker.returned.connect(self._on_connected)
        worker.errored.connect(self._on_failed)
        warning = key_warning(url, api_key)
        shown = without_credentials(url)  # a password typed into the address is never shown
        self.window.statusBar().showMessage(f"Connecting to {shown}…" + (f" (warning: {warning})" if warning else ""))
        self._thread.submit(worker)

    def _on_connected(self, connection: RemoteConnection) -> None:
        self.session.remote = connection
        self.local_action.setEnabled(True)
        info = connection.info
        self.label.setText(f"Remote: {info.name} ({'exact' if info.exact_origins else 'inferred'})")
        self.label.setToolTip(plain_tip(info.describe() + ("" if info.exact_origins else
                              ". Text with a dotted underline arrived in one streamed step with other tokens, which "
                              "is how accepted drafts show; the server does not say which tokens they were.")))
        self.label.show()
        line = f"Chat replies now come from {info.describe()}"
        self.window.statusBar().showMessage(line, 15000)
        self.session.status_changed.emit()  # the race view offers its remote lane
        self.connected.emit(line)

    def _on_failed(self, message: str) -> None:
        self.window.statusBar().showMessage(f"Could not connect: {message}", 15000)
        self.failed.emit(message)

    def disconnect(self) -> None:
        self.session.remote = None
        self.session.status_changed.emit()
        self.local_action.setEnabled(False)
        self.label.hide()
        self.window.statusBar().showMessage("Chat replies come from the local models again.", 10000)

    def _show_reply_figures(self) -> None:
        """After a remote reply: its α/τ with where they come from (the server's metrics are server-wide)."""
        if self.connection is not None and self.connection.engine.figures is not None:
            self.window.statusBar().showMessage(f"Remote reply: {self.connection.engine.figures.label()}", 20000)

    def stop(self) -> None:
        self._thread.stop()


def key_warning(url: str, api_key: str | None) -> str | None:
    """plain_http_key_warning for an address as typed (None for one that is not an address: connecting says so)."""
    from ..remote.transport import _root_url

    try:
        return plain_http_key_warning(_root_url(url), api_key)
    except RemoteError:
        return None


class RemoteDialog(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Chat with a remote engine")
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://gpu-server:8000/v1")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("if the server needs one")
        self.model = QLineEdit()
        self.model.setPlaceholderText("the server's first model")
        form = QFormLayout()
        form.addRow("Endpoint", self.url)
        form.addRow("API key", self.key)
        form.addRow("Model", self.model)
        note = QLabel("The chat's messages are sent to this server. Against specchat serve, draft highlighting is "
                      "exact; against vLLM or SGLang, accepted drafts are inferred from how the reply streams "
                      "(dotted underline) and α/τ come from the server's metrics.")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)
