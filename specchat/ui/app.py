"""Starting the desktop app: QApplication, palette, the database, and the asyncio-driven Qt event loop."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

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


def open_store():
    """The user's database; if it cannot be opened, a temporary one so the app stays usable (and a message)."""
    from ..storage import Store, StorageError, default_database_path, open_database

    path = default_database_path()
    try:
        return Store(open_database(path)), None
    except StorageError as error:
        fallback = Path(tempfile.mkdtemp(prefix="specchat-")) / "specchat.db"
        message = (f"{error}\n\nspecchat is running with a temporary database for now; chats of this session "
                   f"will not be kept.")
        return Store(open_database(fallback)), message


def bring_to_front(window) -> None:
    """Another start of specchat asked for this window."""
    window.showNormal()
    window.raise_()
    window.activateWindow()


def run_gui(argv: list[str] | None = None) -> int:
    import qasync

    from .main_window import MainWindow
    from .session import ChatSession
    from .workers import JobThread

    from ..storage import default_database_path
    from .single_instance import SingleInstance

    app = create_application(argv)
    instance = SingleInstance(default_database_path())
    if not instance.claim():
        print("specchat is already running: its window was brought to the front.", file=sys.stderr)
        return 0
    store, problem = open_store()
    session = ChatSession(store)
    window = MainWindow(session)
    instance.activated.connect(lambda: bring_to_front(window))
    window.show()
    if problem:
        window.banner.show_message(problem)
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
