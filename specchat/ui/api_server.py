"""The window's switch for `specchat serve`: the loaded models over OpenAI's HTTP API, on this machine only.

The server's generations run on the session's model thread, like the window's own replies, so the two never run
at once (they share the models; a reply and an API request queue behind each other). The server listens on
127.0.0.1 (no key needed there; other machines cannot reach it) at port 8000, or a free port when 8000 is taken;
the status bar shows the URL while it runs. It restarts by itself when the models or the decoding settings
change, and stops with the app.

Stopping barely blocks the GUI thread: the generations are cancelled first (an API client sees finish_reason
"abort" or a 503, never a partial reply passed off as complete), then the switch waits for the server's line
thread (which then ends within a step; at most STOP_JOIN_S), and uvicorn is told to exit and shuts down on its own
thread. (A line thread left running into the next server's life crashed the process now and then.) A restart
waits for the old server to let go of its port (polled on a timer, at most RESTART_WAIT_S) so the URL stays the
same. The server answers only Host names and web-page origins on this machine (server/guard.py).
"""

from __future__ import annotations

import queue
import threading
import time
from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QLabel, QMainWindow, QMenu

from ..core.errors import SpecchatError
from ..server.jobs import Closing  # the line only (no web framework): FastAPI and uvicorn load when the server starts
from .workers import FunctionWorker

if TYPE_CHECKING:
    from ..server.run import RunningServer

RESTART_WAIT_S = 5.0  # how long a restart waits for the old server's port before taking any free one
RESTART_POLL_MS = 50
WAIT_POLL_S = 0.1  # how often a waiting request looks at its cancel event
STOP_JOIN_S = 5.0  # a stop waits this long for the line thread, whose generation is already cancelled
DRAIN_MS = 10  # how often the GUI thread hands the server's requests to the model thread, while a server runs


class ModelThreadRunner(QObject):
    """Runs a function on the session's model thread for a caller on another thread, and waits for its end.

    The caller is the server's line thread, which touches no Qt object: it calls `call` (a plain Python function),
    which puts the request in a queue that this object drains on the GUI thread (a timer, while a server runs),
    where the model thread's queue lives; the work itself sets a plain threading.Event when it ends, on the model
    thread, so the caller wakes as soon as it does. No Qt signal is connected to anything the line thread owns:
    calling into a Qt object from the line thread crashed now and then when a restart ran at the same time, and so
    did a `finished` connected to the event's bound method (PySide keeps such a method by a weak reference, and
    the line thread freeing the event disconnected it there, while the model thread was still emitting). A job that cannot run (the app is closing), or whose cancel is set before the
    model thread takes it (the server is stopping while the chat's reply holds the model thread), raises Closing at
    once: the caller never waits for a model thread busy with something else."""

    def __init__(self, model_thread):
        super().__init__()
        self.model_thread = model_thread
        requests: queue.SimpleQueue = queue.SimpleQueue()
        self._requests = requests
        self._timer = QTimer(self, interval=DRAIN_MS)
        self._timer.timeout.connect(self._drain)
        self.call = partial(_call_on_model_thread, requests)

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._drain()
        self._timer.stop()

    @Slot()
    def _drain(self) -> None:
        while True:
            try:
                run, done = self._requests.get_nowait()
            except queue.Empty:
                return
            job = FunctionWorker(run)  # run sets `done` itself, in every case
            try:
                self.model_thread.submit(job)
            except RuntimeError:  # the model thread has been stopped: nothing will run
                done.set()


def _call_on_model_thread(requests: queue.SimpleQueue, work, cancel: threading.Event | None = None):
    """The line thread's side of ModelThreadRunner: work()'s value, its exception, or Closing."""
    done, box, claim = threading.Event(), {}, threading.Lock()

    def run():
        try:
            with claim:
                if "abandoned" in box:
                    return
                box["started"] = True
            box["value"] = work()
        except Exception as error:  # the server answers it (500 with the message); not a window error
            box["error"] = error
        finally:
            done.set()  # the last thing the model thread does with this call's objects

    requests.put((run, done))
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
            served = ServedModel(self.session.pair, self.session.run_context(*self._defaults()), self.session.store,
                                 engines=self.session.engines)  # the chat's: they take turns on the model thread
            self.runner.start()
            try:
                self.server = RunningServer(served, port=self._port or DEFAULT_PORT,
                                            run_on_device=self.runner.call).start()
            except SpecchatError:  # 8000 is taken (another server?): any free port will do
                self.server = RunningServer(served, port=0, run_on_device=self.runner.call).start()
            self._port = self.server.port
        except SpecchatError as error:
            self.action.setChecked(False)
            self._show("", f"The API server could not start: {error}")
            return
        self._show(f"API: {self.url}", f"Serving {served.model_id} over HTTP (OpenAI API, this machine only)")
        self.label.setToolTip(f"{self.url}: an OpenAI-compatible API for editors, scripts and other apps on this "
                              "machine. Its requests and the chat take turns on the model.")

    def stop(self) -> None:
        """Cancels the server's generations, waits for its line thread (at most STOP_JOIN_S, short: the generation
        stops within a step) and lets uvicorn shut down on its own thread; the drain timer stops with it."""
        self._retry.stop()
        if self.server is not None:
            server, self.server = self.server, None
            server.stop(timeout_s=None)
            server.line.close(STOP_JOIN_S)  # its line thread ends before anything else starts
            self.runner.stop()  # nothing is left to hand over: a request still queued was cancelled with the line
            self.stopping, self._stopped_at = server, time.monotonic()
        self._show("", None)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """At the window's close: stops the server like stop(), then waits (at most timeout_s each) for its
        threads, so that none of them reaches this switch's Qt objects after the window is gone. Its generations
        are cancelled first, so the wait is short."""
        servers = [server for server in (self.server, self.stopping) if server is not None]
        self.stop()
        for server in servers:
            server.stop(timeout_s=timeout_s)
            server.line.close(timeout_s)
        self.runner.stop()

    def copy_url(self) -> None:
        if self.url:
            QGuiApplication.clipboard().setText(self.url)

    def _show(self, label: str, message: str | None) -> None:
        self.label.setText(label)
        self.label.setVisible(bool(label))
        self.copy_action.setEnabled(self.server is not None)
        if message:
            self.window.statusBar().showMessage(message, 10000)
