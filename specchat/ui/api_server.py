"""The window's switch for `specchat serve`: the loaded models over OpenAI's HTTP API, on this machine only.

The server's generations run on the session's model thread, like the window's own replies, so the two never run
at once (they share the models; a reply and an API request queue behind each other). The server listens on
127.0.0.1 (no key needed there; other machines cannot reach it) at port 8000, or a free port when 8000 is taken;
the status bar shows the URL while it runs. It restarts by itself when the models or the decoding settings
change, and stops with the app.

Stopping never blocks the GUI thread: the generations are cancelled (an API client sees finish_reason "abort" or a
503, never a partial reply passed off as complete) and uvicorn is told to exit, and the switch returns. A restart
waits for the old server to let go of its port (polled on a timer, at most RESTART_WAIT_S) so the URL stays the
same. The server answers only Host names and web-page origins on this machine (server/guard.py).
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QLabel, QMainWindow, QMenu

from typing import TYPE_CHECKING

from ..engine import SpecchatError
from ..server.jobs import Closing  # the line only (no web framework): FastAPI and uvicorn load when the server starts
from .workers import FunctionWorker

if TYPE_CHECKING:
    from ..server.run import RunningServer

RESTART_WAIT_S = 5.0  # how long a restart waits for the old server's port before taking any free one
RESTART_POLL_MS = 50
WAIT_POLL_S = 0.1  # how often a waiting request looks at its cancel event


class ModelThreadRunner(QObject):
    """Runs a function on the session's model thread for a caller on another thread, and waits for its end.

    The caller is the server's line thread. The job is made and submitted on the GUI thread (a queued signal to
    this object), where the model thread's queue lives; its `finished` is heard directly on the model thread, so
    the caller wakes as soon as the work ends. A job that cannot run (the app is closing), or whose cancel is set
    before the model thread takes it (the server is stopping while the chat's reply holds the model thread), raises
    Closing at once: the caller never waits for a model thread busy with something else."""

    _hand_over = Signal(object)

    def __init__(self, model_thread):
        super().__init__()
        self.model_thread = model_thread
        self._hand_over.connect(self._submit)  # queued: emitted on the line thread, run on the GUI thread

    def __call__(self, work, cancel: threading.Event | None = None):
        done, box, claim = threading.Event(), {}, threading.Lock()

        def run():
            with claim:
                if "abandoned" in box:
                    return
                box["started"] = True
            try:
                box["value"] = work()
            except Exception as error:  # the server answers it (500 with the message); not a window error
                box["error"] = error

        self._hand_over.emit((run, done))
        while not done.wait(WAIT_POLL_S):
            if cancel is not None and cancel.is_set():
                with claim:
                    if "started" not in box:  # it has not started: it never will
                        box["abandoned"] = True
                        raise Closing()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise Closing()
        return box["value"]

    @Slot(object)
    def _submit(self, request) -> None:
        run, done = request
        job = FunctionWorker(run)
        job.finished.connect(done.set, Qt.ConnectionType.DirectConnection)
        try:
            self.model_thread.submit(job)
        except RuntimeError:  # the model thread has been stopped: nothing will run
            done.set()


class ApiServerSwitch(QObject):
    """The "Serve over HTTP" menu item and the URL in the status bar."""

    def __init__(self, window: QMainWindow, session):
        super().__init__(window)
        self.window, self.session = window, session
        self.server: RunningServer | None = None
        self.stopping: RunningServer | None = None  # the last server stopped, until its thread has ended
        self._stopped_at = 0.0
        self._port: int | None = None  # the port of the last server: a restart takes it again
        self._retry = QTimer(self, singleShot=True, interval=RESTART_POLL_MS)
        self._retry.timeout.connect(self._follow_session)
        self.wanted = False
        self.runner = ModelThreadRunner(session.model_thread)
        self.menu = menu = QMenu("&API", window)
        window.menuBar().insertMenu(window.menuBar().actions()[-1], menu)  # before Help
        self.action = QAction("&Serve the model over HTTP (OpenAI API)", window, checkable=True)
        self.action.setToolTip("An OpenAI-compatible API on this machine (127.0.0.1) for editors, scripts and apps")
        self.action.toggled.connect(self.set_wanted)
        menu.addAction(self.action)
        self.copy_action = QAction("&Copy the API's URL", window, enabled=False)
        self.copy_action.triggered.connect(self.copy_url)
        menu.addAction(self.copy_action)
        self.label = QLabel()
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.hide()
        window.statusBar().addPermanentWidget(self.label)
        session.status_changed.connect(self._follow_session)

    @property
    def url(self) -> str | None:
        return f"{self.server.url}/v1" if self.server is not None else None

    def set_wanted(self, on: bool) -> None:
        self.wanted = on
        if on:
            self._follow_session()
        else:
            self.stop()
            self._show("", "The API server is stopped.")

    def _defaults(self) -> tuple[str, object]:
        """The drafter and the generation config the server's requests start from: the chat's."""
        return self.session.settings.drafter, self.session.settings.generation_config()

    def _follow_session(self) -> None:
        """Restarts on new models or settings; waits while models load."""
        running = self.server
        if running is not None and (running.served.pair is not self.session.pair
                                    or (running.served.drafter, running.served.defaults) != self._defaults()):
            self.stop()
        if self.wanted and self.server is None:
            if not self.session.ready:
                self._show("API: waiting for the models…", "")
            elif self._old_server_holds_the_port():
                self._show("API: restarting…", "")
                self._retry.start()
            else:
                self.start()

    def _old_server_holds_the_port(self) -> bool:
        old = self.stopping
        if old is None or old.stopped() or time.monotonic() - self._stopped_at > RESTART_WAIT_S:
            self.stopping = None
            return False
        return True

    def start(self) -> None:
        from ..server.run import DEFAULT_PORT, RunningServer  # about 0.3 s of imports, kept off the app's start
        from ..server.served import ServedModel

        try:
            served = ServedModel(self.session.pair, *self._defaults(), self.session.store)
            try:
                self.server = RunningServer(served, port=self._port or DEFAULT_PORT,
                                            run_on_device=self.runner).start()
            except SpecchatError:  # 8000 is taken (another server?): any free port will do
                self.server = RunningServer(served, port=0, run_on_device=self.runner).start()
            self._port = self.server.port
        except SpecchatError as error:
            self.action.setChecked(False)
            self._show("", f"The API server could not start: {error}")
            return
        self._show(f"API: {self.url}", f"Serving {served.model_id} over HTTP (OpenAI API, this machine only)")
        self.label.setToolTip(f"{self.url}: an OpenAI-compatible API for editors, scripts and other apps on this "
                              "machine. Its requests and the chat take turns on the model.")

    def stop(self) -> None:
        """Returns at once: the server's generations are cancelled and it shuts down on its own threads."""
        self._retry.stop()
        if self.server is not None:
            server, self.server = self.server, None
            server.stop(timeout_s=None)
            self.stopping, self._stopped_at = server, time.monotonic()
        self._show("", None)

    def copy_url(self) -> None:
        if self.url:
            QGuiApplication.clipboard().setText(self.url)

    def _show(self, label: str, message: str | None) -> None:
        self.label.setText(label)
        self.label.setVisible(bool(label))
        self.copy_action.setEnabled(self.server is not None)
        if message:
            self.window.statusBar().showMessage(message, 10000)
