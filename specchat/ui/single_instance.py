"""One specchat window per database: a second start hands over to the first and exits.

Two windows on one database would each write to it without seeing the other's changes. The first instance listens
on a local socket named after the user and the database's path; a later one connects, asks it to come to the front,
and exits. A socket left behind by a crashed instance accepts no connection, so it is removed and claimed anew.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from ..core.fs import fingerprint

CONNECT_MS = 500
ACTIVATE = b"activate\n"


def server_name(database: Path) -> str:
    key = fingerprint(getpass.getuser(), Path(database).resolve(), digits=16)
    return f"specchat-{key}"


class SingleInstance(QObject):
    """claim(): True if this process is now the only instance for the database (it then emits `activated` each time
    another start asks for it), False if another instance has it (which was asked to come to the front)."""

    activated = Signal()

    def __init__(self, database: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.name = server_name(database)
        self.server: QLocalServer | None = None

    def claim(self) -> bool:
        if self._hand_over():
            return False
        QLocalServer.removeServer(self.name)  # a socket file a crashed instance left behind
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            return True  # cannot listen (unusual): run anyway rather than refuse to start
        server.newConnection.connect(self._on_connection)
        self.server = server
        return True

    def release(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def _hand_over(self) -> bool:
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(CONNECT_MS):
            socket.abort()
            return False
        socket.write(ACTIVATE)
        socket.waitForBytesWritten(CONNECT_MS)
        socket.disconnectFromServer()
        if socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
            socket.waitForDisconnected(CONNECT_MS)
        return True

    def _on_connection(self) -> None:
        """Each connection is read once it has its line; it stays a child of the server, which owns its end."""
        while self.server is not None and self.server.hasPendingConnections():
            connection = self.server.nextPendingConnection()
            connection.readyRead.connect(self._on_ready_read)

    def _on_ready_read(self) -> None:
        connection = self.sender()
        if isinstance(connection, QLocalSocket) and bytes(connection.readAll()).startswith(ACTIVATE.strip()):
            self.activated.emit()
