"""Starting the desktop app: QApplication, palette, the database, and the asyncio-driven Qt event loop."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QCoreApplication, QSize, Qt
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication, QStyleFactory

from .. import __version__
from .theme import dark_palette

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def create_application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv or sys.argv)
    QCoreApplication.setOrganizationName("specchat")
    QCoreApplication.setApplicationName("specchat")
    QCoreApplication.setApplicationVersion(__version__)
    QGuiApplication.setDesktopFileName("org.specchat.Specchat")  # Wayland/X11 match windows to the .desktop file
    app.setWindowIcon(app_icon())
    app.setStyle(QStyleFactory.create("Fusion"))
    if _wants_dark(app):
        app.setPalette(dark_palette())
    return app


def app_icon() -> QIcon:
    """The app icon from the shipped SVG, with PNG renderings for sizes where a rasteriser would blur it."""
    from ..resources import resource

    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(resource("icons", f"specchat-{size}.png")), QSize(size, size))
    icon.addFile(str(resource("icons", "specchat.svg")))
    return icon


def _wants_dark(app: QApplication) -> bool:
    """SPECCHAT_THEME=dark|light overrides; otherwise the system's colour scheme."""
    choice = os.environ.get("SPECCHAT_THEME", "").lower()
    if choice in ("dark", "light"):
        return choice == "dark"
    return app.styleHints().colorScheme() == Qt.ColorScheme.Dark


class StartChoice:
    """What the user picked when the database could not be opened (ask_at_start)."""

    RETRY = "retry"
    TEMPORARY = "temporary"
    QUIT = "quit"


def open_store(path: Path | None = None, ask: Callable[[str, str], str] | None = None,
               busy_timeout_ms: int | None = None):
    """The user's database, ready for the window: (store, banner message or None), or (None, None) to quit.

    - Damaged: moved aside as <name>.corrupt-<date> (kept for recovery), a new one started, and the banner says so.
    - Locked by another program: the user is asked to try again or quit. Never a silent switch to another file:
      a session written elsewhere would be lost to the user's history.
    - Unusable as it is (from a newer specchat, a failed upgrade, a folder that cannot be written): left unchanged;
      the user quits or, knowingly, chats in a temporary database that the banner keeps saying is not kept.
    Replies a crash or a kill cut short are marked interrupted first (Store.recover_interrupted).
    ask(kind, message) -> a StartChoice: kind "locked" offers RETRY/QUIT, "unusable" TEMPORARY/QUIT."""
    from ..core.errors import DatabaseDamaged, DatabaseLocked, StorageError
    from ..storage import Store, default_database_path, open_database, quarantine

    path = path or default_database_path()
    ask = ask or ask_at_start
    timeout = {} if busy_timeout_ms is None else {"busy_timeout_ms": busy_timeout_ms}
    banner = None
    while True:
        try:
            store = Store(open_database(path, **timeout))
            break
        except DatabaseLocked as error:
            if ask("locked", str(error)) != StartChoice.RETRY:
                return None, None
        except DatabaseDamaged as error:
            moved = quarantine(path)  # raises DatabaseUnusable when it cannot: asked about below, next time round
            banner = (f"The chat database was damaged ({error.detail or error}), so specchat started a new one. "
                      f"The damaged file is kept as {moved}: `sqlite3 '{moved}' .recover` can often get its chats "
                      "back.")
        except StorageError as error:
            if ask("unusable", str(error)) != StartChoice.TEMPORARY:
                return None, None
            fallback = Path(tempfile.mkdtemp(prefix="specchat-")) / "specchat.db"
            return Store(open_database(fallback)), (f"{error}. specchat is using a temporary database: chats of "
                                                     "this session will not be kept.")
    store.recover_interrupted()
    return store, banner


def ask_at_start(kind: str, message: str) -> str:
    """The start-up question as a dialog (before the window exists)."""
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Warning, "specchat", "The chat database cannot be opened.")
    box.setInformativeText(message[0].upper() + message[1:] + ".")
    if kind == "locked":
        retry = box.addButton("Try again", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        return StartChoice.RETRY if box.clickedButton() is retry else StartChoice.QUIT
    temporary = box.addButton("Use a temporary database", QMessageBox.ButtonRole.AcceptRole)
    box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
    box.exec()
    return StartChoice.TEMPORARY if box.clickedButton() is temporary else StartChoice.QUIT


def bring_to_front(window) -> None:
    """Another start of specchat asked for this window."""
    window.showNormal()
    window.raise_()
    window.activateWindow()


def run_gui(argv: list[str] | None = None) -> int:
    import qasync

    from ..storage import default_database_path
    from .gc_guard import GuiThreadCollector
    from .main_window import MainWindow
    from .session import ChatSession
    from .single_instance import SingleInstance
    from .workers import JobThread

    app = create_application(argv)
    GuiThreadCollector(app).start()  # garbage holding Qt objects is freed on this thread only
    instance = SingleInstance(default_database_path())
    if not instance.claim():
        print("specchat is already running: its window was brought to the front.", file=sys.stderr)
        return 0
    store, problem = open_store()
    if store is None:
        instance.release()
        return 1
    session = ChatSession(store)
    window = MainWindow(session)
    instance.activated.connect(lambda: bring_to_front(window))
    window.show()
    if problem:
        window.banner.show_message(problem)
    if store.database.path.parent != default_database_path().resolve().parent:
        window.setWindowTitle("specchat (temporary database: this session's chats are not kept)")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    with loop:
        loop.run_until_complete(closed.wait())
    # Closing the window waits a bounded time; a job that outlasted it (a model still loading) must end before its
    # QThread is destroyed at exit, which would abort the process.
    JobThread.stop_all(timeout_ms=None)
    instance.release()
    return 0
